/**
 * `portico models pull <ref>`: resolve the reference on the hub, download (node-llama-cpp), verify, and only
 * then move the file into MODELS_DIR and write it into the catalogue. Until that last step the file lives in
 * MODELS_DIR/.partial, which nothing serves; a failure other than an interruption removes it.
 */
import { open, mkdir, rename, rm, rmdir, stat, statfs, writeFile } from 'node:fs/promises';
import { basename, dirname, join, normalize, sep } from 'node:path';
import { ModelCatalogue, type PulledModel, type StoredModel } from './catalogue.js';
import { downloadModelFile, partialProgress, settle } from './download.js';
import { PullError } from './errors.js';
import { formatBytes } from './format.js';
import { displayUrl, fetchSmallFile, headOfFile, listRepoFiles, repoPageUrl, resolveUrl, type Hub, type RepoFile } from './hub.js';
import { acquireLock, LockBusyError } from './lock.js';
import { checkModelName, defaultModelName, isSplitPart, quantInFileName } from './names.js';
import { parseModelRef, WHISPER_MODELS, type ModelRef } from './refs.js';
import { DEFAULT_HUB } from './settings.js';
import { inspectGguf, looksLikeOnnx, notAModel, sniffFormat, verifyFile, type ModelFormat, type ModelKind } from './verify.js';

export interface PullOptions {
  modelsDir: string;
  /** default https://huggingface.co */
  hubEndpoint?: string;
  /** HF token for gated and private repositories; sent to the hub only */
  token?: string;
  /** an extra name to serve the model under (--name) */
  name?: string;
  /** override the text/embedding classification of a GGUF */
  kind?: 'text' | 'embedding';
  /** the SHA-256 to insist on (for URLs whose server announces none) */
  sha256?: string;
  signal?: AbortSignal;
  onEvent?: (e: PullEvent) => void;
  /** a transfer that receives nothing for this long is cut and resumed (PORTICO_PULL_STALL_MS; default 60 s) */
  stallMs?: number;
  /** free bytes in the models directory (tests inject a small quota); default statfs */
  freeBytes?: (dir: string) => Promise<number | undefined>;
}

export type PullEvent =
  | { type: 'resolving'; ref: string }
  | {
      type: 'resolved';
      ref: string;
      name: string;
      source: string;
      file: string;
      size?: number;
      sha256?: string;
      /** bytes an interrupted run completed from the start of the file, without a gap: where the transfer goes on */
      resumeFrom: number;
      /** every byte of it complete (more than resumeFrom when chunks further on are complete too); not fetched again */
      kept: number;
    }
  | { type: 'progress'; downloaded: number; total: number }
  | { type: 'stalled'; downloaded: number; total: number; stalledMs: number; attempt: number; attempts: number }
  | { type: 'verifying'; done: number; total: number }
  | { type: 'done'; model: PulledModel; status: PullResult['status'] };

export interface PullResult {
  model: PulledModel;
  /** pulled: downloaded now; present: the same file was pulled before (an alias may have been added) */
  status: 'pulled' | 'present';
}

/** What the reference resolved to. */
interface Target {
  ref: ModelRef;
  /** the URL handed to the downloader (hub: /resolve/<commit>/<file>) */
  url: string;
  /** repository file path or URL file name */
  file: string;
  owner?: string;
  repo?: string;
  revision?: string;
  /** where it goes under MODELS_DIR ('/'-separated) */
  relPath: string;
  size?: number;
  sha256?: string;
  format: ModelFormat;
  /** for messages */
  what: string;
}

const DEFAULT_QUANT = 'Q4_K_M';
const SAFE_SEGMENT = /[^A-Za-z0-9._+@-]/g;

function segment(s: string): string {
  const t = s.replace(SAFE_SEGMENT, '_');
  return t === '.' || t === '..' || t === '' ? '_' : t;
}

function ggufCandidates(files: RepoFile[]): RepoFile[] {
  return files.filter((f) => /\.gguf$/i.test(f.path) && !/(^|[/_-])mmproj/i.test(f.path.split('/').pop()!));
}

/** Picks the GGUF of a quantization from a repository listing (docs/models.md, "Which file"). */
export function pickGguf(files: RepoFile[], quant: string | undefined, what: string): RepoFile {
  const all = ggufCandidates(files);
  if (all.length === 0) {
    const some = files.slice(0, 8).map((f) => f.path);
    throw new PullError(
      'no_gguf',
      `${what} has no GGUF file${some.length ? ` (it has ${some.join(', ')}${files.length > 8 ? ', ...' : ''})` : ''}; Portico's llama engine runs GGUF models: look for a "-GGUF" repository of this model`,
    );
  }
  // a split model counts once, by its first part
  const singles = all.filter((f) => (isSplitPart(f.path)?.part ?? 1) === 1);
  const describe = (list: RepoFile[]) => [...new Set(list.map((f) => quantInFileName(f.path.split('/').pop()!) ?? f.path))].sort().join(', ');
  const wanted = quant ?? DEFAULT_QUANT;
  const matching = singles.filter((f) => quantInFileName(f.path.split('/').pop()!) === wanted);
  if (matching.length === 1 && matching[0]) return matching[0];
  if (matching.length > 1) {
    throw new PullError('ambiguous', `${what} has ${matching.length} ${wanted} files (${matching.map((f) => f.path).join(', ')}); name one: hf:<owner>/<repo>/<file>`);
  }
  if (!quant && singles.length === 1 && singles[0]) return singles[0];
  throw new PullError('no_gguf', `${what} has no ${wanted} GGUF${quant ? '' : ' (the default)'}; it has: ${describe(singles)}. Pick one with hf:<owner>/<repo>:<quant>`);
}

async function resolveTarget(ref: ModelRef, hub: Hub, kindOverride: PullOptions['kind'], sha256?: string): Promise<Target> {
  if (ref.kind === 'url') {
    const what = displayUrl(ref.url.href);
    const head = await headOfFile(hub, ref.url.href, what);
    const format = sniffFormat(head.head);
    if (!format) throw notAModel(what, head.head, 'any');
    let name = segment(decodeURIComponent(ref.url.pathname.split('/').pop() || '') || 'model');
    if (!/\.(gguf|bin)$/i.test(name)) name += format === 'gguf' ? '.gguf' : '.bin';
    return {
      ref,
      url: ref.url.href,
      file: name,
      relPath: `url/${segment(ref.url.host)}/${name}`,
      size: head.size,
      sha256: head.sha256 ?? sha256?.toLowerCase(),
      format,
      what,
    };
  }
  const repoWhat = `hf:${ref.owner}/${ref.repo}${ref.revision !== 'main' ? `#${ref.revision}` : ''}`;
  const page = repoPageUrl(hub, ref.owner, ref.repo);
  let file: string;
  let listed: RepoFile | undefined;
  let revision = ref.revision;
  if (ref.kind === 'hf-repo') {
    const listing = await listRepoFiles(hub, ref.owner, ref.repo, ref.revision);
    listed = pickGguf(listing.files, ref.quant, repoWhat);
    file = listed.path;
    revision = listing.commit ?? ref.revision;
  } else {
    file = ref.file;
  }
  const split = isSplitPart(file);
  if (split) {
    throw new PullError(
      'split_unsupported',
      `${file} is part ${split.part} of a model split into ${split.parts} files; pull takes single-file models: pick a smaller quantization, or download the parts yourself and name the first in PORTICO_CONFIG`,
    );
  }
  const what = `hf:${ref.owner}/${ref.repo}/${file}`;
  let head;
  try {
    head = await headOfFile(hub, resolveUrl(hub, ref.owner, ref.repo, revision, file), what, page);
  } catch (e) {
    if (e instanceof PullError && e.code === 'not_found' && ref.kind === 'hf-file' && ref.piper) {
      throw new PullError(
        'not_found',
        `piper has no voice "${ref.piper}" (${what}); its voices are listed at https://huggingface.co/rhasspy/piper-voices (e.g. en_US-libritts_r-medium, en_US-amy-medium, en_GB-alba-medium)`,
      );
    }
    if (e instanceof PullError && e.code === 'not_found' && ref.kind === 'hf-file' && ref.whisper) {
      throw new PullError('not_found', `whisper.cpp has no model "${ref.whisper}" (${what}); it has ${WHISPER_MODELS.join(', ')} and their -q5_0/-q5_1/-q8_0 variants`);
    }
    throw e;
  }
  // a piper voice is ONNX, which has no magic number: only a piper reference is read as ONNX
  const format = ref.kind === 'hf-file' && ref.piper ? (looksLikeOnnx(head.head) ? 'onnx' : undefined) : sniffFormat(head.head);
  if (!format) throw notAModel(what, head.head, ref.kind === 'hf-file' && ref.whisper ? 'ggml' : ref.kind === 'hf-file' && ref.piper ? 'onnx' : 'any');
  if (ref.kind === 'hf-file' && ref.whisper && format !== 'ggml') throw notAModel(what, head.head, 'ggml');
  if (format === 'ggml' && kindOverride) throw new PullError('bad_ref', `${what} is a whisper.cpp model (transcription); --kind ${kindOverride} applies to GGUF models`);
  if (format === 'onnx' && kindOverride) throw new PullError('bad_ref', `${what} is a piper voice (speech); --kind ${kindOverride} applies to GGUF models`);
  const commit = head.commit ?? (/^[0-9a-f]{40}$/.test(revision) ? revision : undefined);
  return {
    ref,
    url: resolveUrl(hub, ref.owner, ref.repo, commit ?? revision, file),
    file,
    owner: ref.owner,
    repo: ref.repo,
    revision: commit ?? revision,
    relPath: ['hf', segment(ref.owner), segment(ref.repo), ...file.split('/').map(segment)].join('/'),
    size: listed?.size ?? head.size,
    sha256: listed?.sha256 ?? head.sha256 ?? sha256?.toLowerCase(),
    format,
    what,
  };
}

/** The names the model gets: its default name (owner-qualified if another file has it) and the --name alias. */
function chooseNames(models: StoredModel[], t: Target, alias: string | undefined, same: StoredModel | undefined): { name: string; aliases: string[] } {
  const holder = (n: string) => models.find((m) => m !== same && (m.name === n || m.aliases.includes(n)));
  let name = same?.name;
  if (!name) {
    const plain = defaultModelName(t.file);
    const qualifier = t.owner ?? (t.ref.kind === 'url' ? t.ref.url.hostname : undefined);
    const candidates = [plain, ...(qualifier ? [defaultModelName(t.file, qualifier)] : [])];
    name = candidates.find((c) => !holder(c));
    if (!name) {
      if (alias && !holder(alias)) return { name: alias, aliases: [] };
      const h = holder(plain)!;
      throw new PullError('name_taken', `the name "${plain}" is taken by ${h.source.ref}; give this model a name with --name`);
    }
  }
  const aliases = [...(same?.aliases ?? [])];
  if (alias && alias !== name && !aliases.includes(alias)) {
    const h = holder(alias);
    if (h) throw new PullError('name_taken', `the name "${alias}" is taken by ${h.name} (${h.source.ref}); pick another, or \`portico models rm ${alias}\` first`);
    aliases.push(alias);
  }
  return { name, aliases };
}

async function freeSpace(dir: string): Promise<number | undefined> {
  try {
    const s = await statfs(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}

async function readHead(path: string): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const b = Buffer.alloc(16);
    const { bytesRead } = await fh.read(b, 0, 16, 0);
    return b.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/** Removes empty folders from `dir` up to (not including) `root`. */
async function pruneEmpty(dir: string, root: string): Promise<void> {
  for (let d = dir; normalize(d).startsWith(normalize(root) + sep); d = dirname(d)) {
    try {
      await rmdir(d);
    } catch {
      return;
    }
  }
}

/** A piper voice's .onnx.json, from the same commit as the voice, checked to be one. */
async function fetchVoiceConfig(hub: Hub, t: Target): Promise<Buffer> {
  const file = `${t.file}.json`;
  const what = `hf:${t.owner}/${t.repo}/${file}`;
  const bytes = await fetchSmallFile(hub, resolveUrl(hub, t.owner!, t.repo!, t.revision ?? 'main', file), what, 1 << 20, repoPageUrl(hub, t.owner!, t.repo!));
  let doc: any;
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new PullError('not_a_model', `${what} is not the voice's JSON config`);
  }
  if (!Number.isInteger(doc?.audio?.sample_rate) || !doc.phoneme_id_map || typeof doc.phoneme_id_map !== 'object') {
    throw new PullError('not_a_model', `${what} is not a piper voice config (it needs audio.sample_rate and phoneme_id_map)`);
  }
  return bytes;
}

export async function pullModel(refText: string, o: PullOptions): Promise<PullResult> {
  const hub: Hub = { endpoint: (o.hubEndpoint ?? DEFAULT_HUB).replace(/\/+$/, ''), token: o.token || undefined, signal: o.signal };
  const emit = (e: PullEvent) => o.onEvent?.(e);
  const ref = parseModelRef(refText, hub.endpoint);
  if (o.name !== undefined) checkModelName(o.name);
  if (o.sha256 !== undefined && !/^[0-9a-f]{64}$/i.test(o.sha256)) throw new PullError('bad_ref', `--sha256 must be 64 hexadecimal digits`);
  if (o.kind !== undefined && o.kind !== 'text' && o.kind !== 'embedding') throw new PullError('bad_ref', `--kind must be text or embedding`);
  emit({ type: 'resolving', ref: ref.text });
  const t = await resolveTarget(ref, hub, o.kind, o.sha256);
  if (o.sha256 && t.sha256 && t.sha256 !== o.sha256.toLowerCase()) {
    throw new PullError('verification_failed', `${t.what}: the hub announces SHA-256 ${t.sha256}, not the --sha256 given`);
  }
  const catalogue = new ModelCatalogue(o.modelsDir);
  const finalPath = catalogue.filePath(t.relPath);

  // pulled before: the same file, unchanged on the hub
  const known = await catalogue.list();
  const same = known.find((m) => m.file === t.relPath);
  const unchanged = (m: StoredModel) => (t.sha256 ? m.sha256 === t.sha256 : t.size === undefined || m.size === t.size);
  if (
    same &&
    unchanged(same) &&
    (await stat(finalPath).then(
      (s) => s.size === same.size,
      () => false,
    ))
  ) {
    const model = await catalogue.update((models) => {
      const m = models.find((x) => x.file === t.relPath);
      if (!m) throw new PullError('unknown_model', `${t.what} was removed while this pull ran`);
      const names = chooseNames(models, t, o.name, m);
      m.aliases = names.aliases;
      if (o.kind && m.format === 'gguf') m.kind = o.kind;
      return m;
    });
    const pulled = { ...model, path: finalPath };
    emit({ type: 'done', model: pulled, status: 'present' });
    return { model: pulled, status: 'present' };
  }
  const names = chooseNames(known, t, o.name, same); // fail before downloading; checked again when written

  const stagingDir = join(o.modelsDir, '.partial', ...t.relPath.split('/').slice(0, -1));
  const fileName = basename(finalPath);
  await mkdir(stagingDir, { recursive: true });
  let lock;
  try {
    lock = await acquireLock(join(stagingDir, `${fileName}.lock`), { staleMs: 60_000, heartbeatMs: 10_000 });
  } catch (e) {
    if (e instanceof LockBusyError) throw new PullError('busy', `${t.what} is being pulled already (${e.holder}); wait for it, or delete ${e.path} if that process is gone`);
    throw e;
  }
  let committing = false;
  // a write of ipull's still under way (its progress record) may create the partial file again after it was
  // removed, later than download.ts's settle() saw it quiet on a busy machine: removed until it stays away
  const cleanup = async () => {
    const partial = join(stagingDir, `${fileName}.ipull`);
    for (let i = 0; i < 5; i++) {
      await rm(join(stagingDir, fileName), { force: true });
      await rm(partial, { force: true });
      await settle(partial, 300, 5000);
      if (!(await stat(partial).catch(() => undefined))) return;
    }
  };
  try {
    // what an interrupted run left: read from the downloader's own record of complete chunks, not the file's size
    const partial = await partialProgress(stagingDir, fileName, t.size);
    if (t.size !== undefined) {
      const free = await (o.freeBytes ?? freeSpace)(o.modelsDir);
      const need = t.size - partial.kept;
      if (free !== undefined && free < need + (16 << 20)) {
        throw new PullError(
          'disk_full',
          `not enough disk space for ${t.what} in ${o.modelsDir}: it needs ${formatBytes(need)} more, ${formatBytes(free)} is free; free some space or point MODELS_DIR at a larger disk`,
        );
      }
    }
    emit({
      type: 'resolved',
      ref: ref.text,
      name: names.name,
      source: displayUrl(t.url),
      file: t.relPath,
      size: t.size,
      sha256: t.sha256,
      resumeFrom: partial.contiguous,
      kept: partial.kept,
    });
    const downloaded = await downloadModelFile({
      url: t.url,
      dir: stagingDir,
      fileName,
      hubEndpoint: hub.endpoint,
      token: hub.token,
      signal: o.signal,
      onProgress: (downloaded, total) => emit({ type: 'progress', downloaded, total }),
      stallMs: o.stallMs,
      onStall: (info) => emit({ type: 'stalled', ...info }),
    });
    const v = await verifyFile(downloaded, { size: t.size, sha256: t.sha256 }, t.what, (done, total) => emit({ type: 'verifying', done, total }));
    if (o.signal?.aborted) throw new PullError('interrupted', 'stopped during verification; the download is kept: run the same command again to finish', true);
    const head = await readHead(downloaded);
    const format = t.format === 'onnx' ? (looksLikeOnnx(head) ? 'onnx' : undefined) : sniffFormat(head);
    if (format !== t.format) throw notAModel(t.what, head, t.format);
    let kind: ModelKind = 'transcription';
    let architecture: string | undefined;
    if (format === 'gguf') {
      const info = await inspectGguf(downloaded, t.what);
      kind = o.kind ?? info.kind;
      architecture = info.architecture;
    }
    if (format === 'onnx') kind = 'speech';
    // a piper voice is spoken with its .onnx.json (sample rate, phonemes, speakers): fetched and checked before the
    // voice is put in place, then written beside it
    const companion = format === 'onnx' && t.owner ? await fetchVoiceConfig(hub, t) : undefined;
    await mkdir(dirname(finalPath), { recursive: true });
    if (companion) await writeFile(`${finalPath}.json`, companion);
    await rename(downloaded, finalPath);
    const stored = await catalogue.update((models) => {
      // from here the file is in place: should this write fail, it must not stay behind uncatalogued
      committing = true;
      const prior = models.find((m) => m.file === t.relPath);
      const n = chooseNames(models, t, o.name, prior);
      const entry: StoredModel = {
        name: n.name,
        aliases: n.aliases,
        kind,
        format,
        file: t.relPath,
        size: v.size,
        sha256: v.sha256,
        ...(architecture ? { architecture } : {}),
        source: {
          ref: ref.text,
          url: t.ref.kind === 'url' ? displayUrl(t.url) : t.url,
          ...(t.owner ? { repo: `${t.owner}/${t.repo}`, revision: t.revision, file: t.file } : {}),
        },
        pulledAt: new Date().toISOString(),
      };
      if (prior) models.splice(models.indexOf(prior), 1, entry);
      else models.push(entry);
      return entry;
    });
    const model = { ...stored, path: finalPath };
    emit({ type: 'done', model, status: 'pulled' });
    return { model, status: 'pulled' };
  } catch (e) {
    if (!(e instanceof PullError && e.resumable)) await cleanup();
    if (committing && !(await catalogue.list().catch(() => [])).some((m) => m.file === t.relPath)) {
      await rm(finalPath, { force: true });
      if (t.format === 'onnx') await rm(`${finalPath}.json`, { force: true });
    }
    throw e;
  } finally {
    await lock.release();
    await pruneEmpty(stagingDir, o.modelsDir);
  }
}
