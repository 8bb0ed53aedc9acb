/**
 * Speech recognition with the CMU Sphinx command-line decoder, run as a child process per request.
 *
 * Two CLI generations are understood:
 * - `pocketsphinx_continuous` (Debian 12 `pocketsphinx` 0.8+5prealpha, the one tested here): raw 16-bit PCM on
 *   file via `-infile audio.raw -time yes` (a temp file: node's stdin pipes are sockets it cannot open); it prints, per utterance found by its VAD, the hypothesis line and
 *   then one `word start end confidence` line per word (absolute seconds, `end` is the start of the last frame).
 * - `pocketsphinx` 5.x (`pocketsphinx single audio.wav`): a WAV temp file, one JSON object per utterance
 *   `{"b":begin,"d":duration,"p":prob,"t":"text","w":[{"b","d","p","t"}...]}`. Parsed by the same code
 *   path; not tested against a real 5.x binary on these machines.
 *
 * English only (the Debian model is `pocketsphinx-en-us`), no translation, no language detection.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EngineError, type TranscribeRequest, type Transcript, type TranscriptionEngine, type TranscriptWord } from '../types.js';
import { groupWordsIntoSegments, type SegmentOptions } from '../shared/segments.js';
import { whenIdle } from '../shared/idle.js';
import { wavHeader } from '../../codec/wav.js';
import { POCKETSPHINX_INSTALL_HINT, findOnPath, flavorOf, type PocketsphinxFlavor } from './detect.js';

export { groupWordsIntoSegments, capitalizeFirst, type SegmentOptions } from '../shared/segments.js';
export { DEBIAN_MODEL_DIR, POCKETSPHINX_INSTALL_HINT, detectPocketsphinx, type PocketsphinxDetection, type PocketsphinxFlavor } from './detect.js';

const SAMPLE_RATE = 16000;

export interface PocketsphinxOptions {
  /** executable name or path; default: `pocketsphinx_continuous`, else `pocketsphinx` (5.x) found on PATH */
  binary?: string;
  /** output flavor; default from the binary name (`pocketsphinx` -> json, anything else -> continuous) */
  flavor?: PocketsphinxFlavor;
  /** acoustic model directory (-hmm); default: the binary's built-in default */
  hmm?: string;
  /** language model (-lm) */
  lm?: string;
  /** pronunciation dictionary (-dict) */
  dict?: string;
  /** further CLI arguments, placed before the input */
  extraArgs?: string[];
  /** kill the process after this long; default 20 s + 3 x the audio duration */
  timeoutMs?: number;
  /** decoder processes running at once (each uses one core); more requests wait. Default 2 */
  maxConcurrent?: number;
  /** how words are grouped into segments */
  segments?: SegmentOptions;
}

// ---------------------------------------------------------------- output parsing

export interface RecognizedUtterance {
  text: string;
  /** timed words including fillers such as <s>, <sil>, [NOISE] (removed later) */
  words: TranscriptWord[];
}

const NUM = /^-?\d+(?:\.\d+)?$/;

/** Parses `pocketsphinx_continuous -time yes` output: a hypothesis line, then `word start end conf` lines. */
export function parseContinuousOutput(out: string): RecognizedUtterance[] {
  const utts: RecognizedUtterance[] = [];
  let cur: RecognizedUtterance | undefined;
  for (const raw of out.split('\n')) {
    const line = raw.trim();
    const parts = line.split(/\s+/);
    const [word = '', start = '', end = '', conf = ''] = parts;
    const isWord = parts.length === 4 && NUM.test(start) && NUM.test(end) && NUM.test(conf) && start.includes('.');
    if (isWord) {
      if (!cur || (word === '<s>' && cur.words.length > 0)) {
        cur = { text: '', words: [] };
        utts.push(cur);
      }
      // the end column is the start time of the word's last 10 ms frame; the last one is its posterior probability
      cur.words.push({ word, start: Number(start), end: Number(end) + 0.01, probability: Number(conf) });
    } else if (line.length > 0) {
      cur = { text: line, words: [] };
      utts.push(cur);
    }
  }
  return utts;
}

/** Parses pocketsphinx 5.x JSON lines: `{"b","d","p","t","w":[{"b","d","p","t"}]}` per utterance. */
export function parseJsonOutput(out: string): RecognizedUtterance[] {
  const utts: RecognizedUtterance[] = [];
  for (const raw of out.split('\n')) {
    const line = raw.trim();
    if (!line.startsWith('{')) continue;
    let o: { t?: unknown; w?: unknown };
    try {
      o = JSON.parse(line);
    } catch {
      throw new EngineError('pocketsphinx printed output that is not JSON: ' + line.slice(0, 200), 'engine_error', 502);
    }
    const words: TranscriptWord[] = [];
    if (Array.isArray(o.w)) {
      for (const w of o.w as Array<{ b?: unknown; d?: unknown; t?: unknown; p?: unknown }>) {
        if (typeof w.t !== 'string' || typeof w.b !== 'number' || typeof w.d !== 'number') continue;
        words.push({ word: w.t, start: w.b, end: w.b + w.d, ...(typeof w.p === 'number' ? { probability: w.p } : {}) });
      }
    }
    utts.push({ text: typeof o.t === 'string' ? o.t : '', words });
  }
  return utts;
}

/** `<s>`, `</s>`, `<sil>`, `[NOISE]`, `++GARBAGE++`: decoder markers and fillers, not words */
export function isFiller(word: string): boolean {
  return word.startsWith('<') || word.startsWith('[') || word.startsWith('++') || word === '';
}

/**
 * Builds a Transcript from recognized utterances: drops fillers, strips `word(2)` variants, clamps times, and
 * groups the words into segments at utterance boundaries, pauses (a dropped `<sil>` leaves its silence as a
 * gap between words) and length limits (../shared/segments.ts), with confidences from the word posteriors.
 */
export function utterancesToTranscript(utts: RecognizedUtterance[], duration: number, segOpts?: SegmentOptions): Transcript {
  const words: TranscriptWord[] = [];
  const breaksBefore = new Set<number>();
  for (const u of utts) {
    let first = true;
    for (const w of u.words) {
      if (isFiller(w.word)) continue;
      const word = w.word.replace(/\(\d+\)$/, '');
      let start = Math.max(0, Math.min(w.start, duration));
      let end = Math.max(start, Math.min(w.end, duration));
      const prev = words[words.length - 1];
      if (prev && start < prev.end) start = Math.min(prev.end, end);
      if (end < start) end = start;
      if (first) {
        breaksBefore.add(words.length);
        first = false;
      }
      const p = w.probability;
      words.push({ word, start: round3(start), end: round3(end), ...(p !== undefined && Number.isFinite(p) ? { probability: Math.min(1, Math.max(0, p)) } : {}) });
    }
  }
  // pocketsphinx decodes without sampling: temperature 0 whatever the request asked; no token ids
  const segments = groupWordsIntoSegments(words, { ...segOpts, breaksBefore }).map((s) => ({ ...s, temperature: 0, tokens: [] }));
  return {
    text: segments.map((s) => s.text).join(' '),
    language: 'en',
    duration: round3(duration),
    segments,
    words,
  };
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

// ---------------------------------------------------------------- audio

/** Float [-1, 1] -> 16-bit signed little-endian PCM bytes */
export function floatToPcm16le(pcm: Float32Array): Buffer {
  const buf = Buffer.allocUnsafe(pcm.length * 2);
  for (let i = 0; i < pcm.length; i++) {
    const s = Math.max(-1, Math.min(1, pcm[i]!));
    buf.writeInt16LE(Math.round(s < 0 ? s * 32768 : s * 32767), i * 2);
  }
  return buf;
}

// ---------------------------------------------------------------- engine

class Semaphore {
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  constructor(private readonly max: number) {}
  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (this.active < this.max) {
      this.active++;
      return () => this.release();
    }
    await new Promise<void>((resolve, reject) => {
      const go = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(go);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(abortedError());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(go);
    });
    this.active++;
    return () => this.release();
  }
  private release(): void {
    this.active--;
    const next = this.waiting.shift();
    if (next) next();
  }
}

/** Aborts are reported as EngineError code `aborted` (status 499: the client went away). */
function abortedError(): EngineError {
  return new EngineError('transcription aborted', 'aborted', 499);
}

export interface PocketsphinxEngine extends TranscriptionEngine {
  readonly binary: string;
  readonly flavor: PocketsphinxFlavor;
}

/**
 * Creates the engine. It does not check the installation (use detectPocketsphinx for that); a missing binary
 * gives an EngineError with code `engine_unavailable` (503) at the first transcription.
 */
export function createPocketsphinxEngine(opts: PocketsphinxOptions = {}): PocketsphinxEngine {
  const binary = opts.binary ?? (findOnPath('pocketsphinx_continuous') ? 'pocketsphinx_continuous' : findOnPath('pocketsphinx') ? 'pocketsphinx' : 'pocketsphinx_continuous');
  const flavor = opts.flavor ?? flavorOf(binary);
  const sem = new Semaphore(Math.max(1, opts.maxConcurrent ?? 2));
  const running = new Set<() => void>();
  let closed = false;
  /** transcriptions under way, waiting for a process or running one (a retiring engine closes once there are none) */
  let active = 0;

  function args(file: string): string[] {
    const a: string[] = [];
    if (opts.hmm) a.push('-hmm', opts.hmm);
    if (opts.lm) a.push('-lm', opts.lm);
    if (opts.dict) a.push('-dict', opts.dict);
    if (opts.extraArgs) a.push(...opts.extraArgs);
    if (flavor === 'continuous') a.push('-infile', file, '-time', 'yes');
    else a.push('single', file);
    return a;
  }

  async function run(pcm: Float32Array, signal?: AbortSignal): Promise<string> {
    const body = floatToPcm16le(pcm);
    const dir = await mkdtemp(join(tmpdir(), 'portico-psphinx-'));
    try {
      const file = join(dir, flavor === 'json' ? 'audio.wav' : 'audio.raw');
      await writeFile(file, flavor === 'json' ? Buffer.concat([wavHeader(SAMPLE_RATE, 1, body.length), body]) : body);
      return await runOn(file, pcm.length / SAMPLE_RATE, signal);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  function runOn(file: string, duration: number, signal?: AbortSignal): Promise<string> {
    const timeoutMs = opts.timeoutMs ?? Math.min(20_000 + Math.ceil(duration * 3000), 30 * 60_000);
    return new Promise<string>((resolve, reject) => {
      if (signal?.aborted) return reject(abortedError());
      const child = spawn(binary, args(file), { stdio: ['ignore', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      let errTail = '';
      let settled = false;
      const finish = (err: EngineError | null, value?: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        running.delete(kill);
        if (err) {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
          reject(err);
        } else resolve(value ?? '');
      };
      const kill = () => finish(abortedError());
      const onAbort = () => finish(abortedError());
      running.add(kill);
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(
        () =>
          finish(
            new EngineError(
              `pocketsphinx did not finish within ${Math.round(timeoutMs / 1000)} s for ${duration.toFixed(1)} s of audio; the process was killed`,
              'engine_error',
              504,
            ),
          ),
        timeoutMs,
      );
      child.on('error', (e: NodeJS.ErrnoException) => {
        if (e.code === 'ENOENT') {
          finish(new EngineError(`pocketsphinx is not installed (${binary} not found); install it with: ${POCKETSPHINX_INSTALL_HINT}`, 'engine_unavailable', 503));
        } else {
          finish(new EngineError(`could not run pocketsphinx (${binary}): ${e.message}`, 'engine_error', 502));
        }
      });
      child.stdout.on('data', (d: Buffer) => out.push(d));
      child.stderr.on('data', (d: Buffer) => {
        errTail = (errTail + d.toString('utf8')).slice(-8192);
      });
      child.on('close', (code, sig) => {
        if (code === 0) return finish(null, Buffer.concat(out).toString('utf8'));
        const errors = errTail
          .split('\n')
          .filter((l) => /ERROR|FATAL/.test(l))
          .slice(-3)
          .join(' | ')
          .trim();
        finish(new EngineError(`pocketsphinx failed (${code !== null ? 'exit code ' + code : 'signal ' + sig})${errors ? ': ' + errors.slice(0, 500) : ''}`, 'engine_error', 502));
      });
    });
  }

  return {
    kind: 'pocketsphinx',
    binary,
    flavor,
    needsPcm: true,
    canTranslate: false,
    languages: ['en'],
    /**
     * Needs req.pcm16k. A language other than English is refused (400 unsupported_language). task 'translate'
     * gives the English transcript (the speech is English, so its translation to English is itself).
     */
    async transcribe(req: TranscribeRequest): Promise<Transcript> {
      if (closed) throw new EngineError('the pocketsphinx engine is closed', 'engine_unavailable', 503);
      const lang = req.language?.trim().toLowerCase();
      if (lang && lang !== 'en' && !lang.startsWith('en-') && lang !== 'english') {
        throw new EngineError(`pocketsphinx recognizes English only; language '${req.language}' is not supported`, 'unsupported_language', 400);
      }
      if (!req.pcm16k) throw new EngineError('pocketsphinx needs 16 kHz PCM (pcm16k) decoded by the audio service', 'internal_error', 500);
      const pcm = req.pcm16k;
      const duration = pcm.length / SAMPLE_RATE;
      if (req.signal?.aborted) throw abortedError();
      if (pcm.length === 0) return { text: '', language: 'en', duration: 0, segments: [], words: [] };
      active++;
      try {
        const release = await sem.acquire(req.signal);
        try {
          const out = await run(pcm, req.signal);
          const utts = flavor === 'json' ? parseJsonOutput(out) : parseContinuousOutput(out);
          return utterancesToTranscript(utts, duration, opts.segments);
        } finally {
          release();
        }
      } finally {
        active--;
      }
    },
    async close(): Promise<void> {
      closed = true;
      for (const k of [...running]) k();
    },
    /** closes once no transcription is under way (a reload retired this model) */
    async retire(): Promise<void> {
      await whenIdle(() => closed || active === 0);
      closed = true;
    },
  };
}
