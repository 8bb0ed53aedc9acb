/**
 * Model references `portico models pull` accepts (docs/models.md, "Pulling models"):
 *
 *   hf:<owner>/<repo>[:<quant>][#<revision>]     the GGUF of that quantization in a Hugging Face repository
 *                                                (default Q4_K_M, or the repository's only GGUF)
 *   hf:<owner>/<repo>/<path/file>[#<revision>]   one file of a repository (a .gguf, or a whisper.cpp ggml .bin)
 *   whisper:<name>                               a whisper.cpp model: hf:ggerganov/whisper.cpp/ggml-<name>.bin
 *   piper:<voice>                                a piper voice (en_US-libritts_r-medium): its .onnx in rhasspy/piper-voices
 *                                                (<lang>/<lang_REGION>/<name>/<quality>/<voice>.onnx), and its .onnx.json
 *   https://...                                  any URL; hub URLs (.../<owner>/<repo>/resolve|blob/<rev>/<file>)
 *                                                are read as hf: references, so they get the checksum and token
 */
import { PullError } from './errors.js';

export const WHISPER_REPO = { owner: 'ggerganov', repo: 'whisper.cpp' } as const;
/** whisper.cpp's published models (for hints; other names are still tried) */
export const WHISPER_MODELS = ['tiny', 'tiny.en', 'base', 'base.en', 'small', 'small.en', 'medium', 'medium.en', 'large-v1', 'large-v2', 'large-v3', 'large-v3-turbo'];

export const PIPER_REPO = { owner: 'rhasspy', repo: 'piper-voices' } as const;
/** piper voice names: <lang>_<REGION>-<name>-<quality> */
const PIPER_VOICE = /^([a-z]{2,3})_([A-Z]{2})-([A-Za-z0-9_]{1,60})-(x_low|low|medium|high)$/;

/** Where rhasspy/piper-voices keeps a voice's .onnx (its .onnx.json is beside it). */
export function piperVoicePath(voice: string): string | undefined {
  const m = PIPER_VOICE.exec(voice);
  if (!m) return undefined;
  return `${m[1]}/${m[1]}_${m[2]}/${m[3]}/${m[4]}/${voice}.onnx`;
}

export type ModelRef =
  | { kind: 'hf-repo'; text: string; owner: string; repo: string; quant?: string; revision: string }
  | { kind: 'hf-file'; text: string; owner: string; repo: string; file: string; revision: string; whisper?: string; piper?: string }
  | { kind: 'url'; text: string; url: URL };

const HELP =
  'use hf:<owner>/<repo>[:<quant>], hf:<owner>/<repo>/<file>.gguf, whisper:<name> (e.g. whisper:base.en), piper:<voice> (e.g. piper:en_US-libritts_r-medium) or an https:// URL';
/** owner and repository names as the hub allows them */
const REPO_PART = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,95})$/;
const QUANT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$/;
const REVISION = /^[A-Za-z0-9._/-]{1,200}$/;

function bad(text: string, why: string): PullError {
  return new PullError('bad_ref', `"${text}" is not a model reference: ${why}; ${HELP}`);
}

function checkPathSegments(text: string, segments: string[]): void {
  for (const s of segments) {
    if (s === '' || s === '.' || s === '..' || s.includes('\\') || /[\u0000-\u001f]/.test(s)) throw bad(text, `bad file path segment "${s}"`);
  }
}

function splitRevision(text: string, rest: string): [string, string] {
  const i = rest.indexOf('#');
  if (i < 0) return [rest, 'main'];
  const rev = rest.slice(i + 1);
  if (!REVISION.test(rev) || rev.split('/').some((s) => s === '' || s === '..')) throw bad(text, `bad revision "${rev}"`);
  return [rest.slice(0, i), rev];
}

function parseHf(text: string, body: string): ModelRef {
  const [path, revision] = splitRevision(text, body);
  const parts = path.split('/');
  if (parts.length < 2 || !parts[0] || !parts[1]) throw bad(text, 'an hf: reference names <owner>/<repo>');
  const [owner, repoAndQuant, ...file] = parts;
  if (!REPO_PART.test(owner)) throw bad(text, `bad owner "${owner}"`);
  if (file.length > 0) {
    if (!REPO_PART.test(repoAndQuant)) throw bad(text, `bad repository name "${repoAndQuant}"`);
    checkPathSegments(text, file);
    return { kind: 'hf-file', text, owner, repo: repoAndQuant, file: file.join('/'), revision };
  }
  const colon = repoAndQuant.indexOf(':');
  const repo = colon < 0 ? repoAndQuant : repoAndQuant.slice(0, colon);
  const quant = colon < 0 ? undefined : repoAndQuant.slice(colon + 1);
  if (!REPO_PART.test(repo)) throw bad(text, `bad repository name "${repo}"`);
  if (quant !== undefined && !QUANT.test(quant)) throw bad(text, `bad quantization "${quant}" (e.g. Q4_K_M, Q8_0)`);
  return { kind: 'hf-repo', text, owner, repo, quant: quant?.toUpperCase(), revision };
}

function isHubHost(url: URL, hub: URL): boolean {
  if (url.origin === hub.origin) return true;
  const dflt = hub.hostname === 'huggingface.co' || hub.hostname === 'hf.co';
  return dflt && (url.hostname === 'huggingface.co' || url.hostname === 'hf.co');
}

function parseUrl(text: string, hubEndpoint: string): ModelRef {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw bad(text, 'not a valid URL');
  }
  if (url.username || url.password) throw bad(text, 'a URL with a user name or password; give tokens through HF_TOKEN');
  const hub = new URL(hubEndpoint);
  const hubPath = hub.pathname.replace(/\/+$/, '');
  if (isHubHost(url, hub) && (url.origin !== hub.origin || url.pathname.startsWith(hubPath + '/'))) {
    const rel = (url.origin === hub.origin ? url.pathname.slice(hubPath.length) : url.pathname).split('/').filter(Boolean).map(decodeURIComponent);
    const [owner, repo, verb, rev, ...file] = rel;
    if (owner && repo && (verb === 'resolve' || verb === 'blob') && rev && file.length > 0 && REPO_PART.test(owner) && REPO_PART.test(repo)) {
      checkPathSegments(text, file);
      return { kind: 'hf-file', text, owner, repo, file: file.join('/'), revision: rev };
    }
    if (owner && repo && rel.length === 2 && REPO_PART.test(owner) && REPO_PART.test(repo)) return { kind: 'hf-repo', text, owner, repo, revision: 'main' };
  }
  return { kind: 'url', text, url };
}

/** Parses a reference; throws PullError('bad_ref') with the accepted forms when it is none of them. */
export function parseModelRef(input: string, hubEndpoint: string): ModelRef {
  const text = input.trim();
  if (!text) throw bad(input, 'it is empty');
  const lower = text.toLowerCase();
  if (lower.startsWith('whisper:')) {
    const name = text.slice('whisper:'.length);
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name) || name.includes('..')) {
      throw bad(text, `bad whisper model name "${name}" (whisper.cpp has ${WHISPER_MODELS.join(', ')}, and -q5_0/-q8_0 variants)`);
    }
    return { kind: 'hf-file', text, ...WHISPER_REPO, file: `ggml-${name}.bin`, revision: 'main', whisper: name };
  }
  if (lower.startsWith('piper:')) {
    const voice = text.slice('piper:'.length);
    const file = piperVoicePath(voice);
    if (!file) throw bad(text, `bad piper voice "${voice}": piper voices are named <lang>_<REGION>-<name>-<quality>, e.g. en_US-libritts_r-medium, en_GB-alba-medium`);
    return { kind: 'hf-file', text, ...PIPER_REPO, file, revision: 'main', piper: voice };
  }
  for (const prefix of ['hf://', 'hf:', 'huggingface:']) {
    if (lower.startsWith(prefix)) return parseHf(text, text.slice(prefix.length));
  }
  if (lower.startsWith('https://') || lower.startsWith('http://')) return parseUrl(text, hubEndpoint);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) throw bad(text, `the scheme "${text.split(':')[0]}:" is not supported`);
  if (/^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*(:[\w.-]+)?$/.test(text)) throw bad(text, `did you mean hf:${text}?`);
  throw bad(text, 'unknown form');
}
