/**
 * Speech recognition with whisper.cpp, through the native module of its Node binding: the prebuilt CPU package
 * for this platform, `@fugood/node-whisper-<platform>-<arch>`, an optional dependency npm installs by itself
 * (./detect.ts says why not the binding's wrapper). PORTICO_WHISPER_BINDING (`packageName`) names another build
 * instead: a module specifier, a path or a file: URL; a module with the wrapper's `initWhisper` works too (the
 * tests' fakes). The module is loaded at the first transcription, never before, and the model with it.
 *
 * Gives segments, language detection (language omitted -> auto), translation to English, word timings (token
 * timestamps, one token per segment, merged back into words and regrouped into segments), and the text as it is
 * decoded (onNewSegments -> TranscribeRequest.onText).
 */
import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { createRequire } from 'node:module';
import { EngineError, type TranscribeRequest, type Transcript, type TranscriptionEngine, type TranscriptSegment, type TranscriptWord } from '../types.js';
import { groupWordsIntoSegments } from '../shared/segments.js';
import { whenIdle } from '../shared/idle.js';
import { WHISPER_SETUP_HINT, bindingTarget, whisperPlatformPackage, whisperUnavailableHint } from './detect.js';
import { settledWithin } from '../../platform/within.js';

export { WHISPER_PLATFORMS, WHISPER_SETUP_HINT, WHISPER_VERSION, detectWhisperBinding, hasWhisperPrebuilt, whisperPlatformPackage, whisperUnavailableHint } from './detect.js';

export interface WhisperOptions {
  /** path of a ggml whisper model file (required) */
  modelPath: string;
  /** CPU threads per transcription (default: the binding's default, up to 8) */
  threads?: number;
  useGpu?: boolean;
  /**
   * whisper's temperature fallback (re-decoding at higher temperatures when a window's result looks wrong): on
   * unless false (the benchmark's random-weight mode, where every window would look wrong)
   */
  fallback?: boolean;
  /** the binding to load instead of this platform's package: a module specifier, a path or a file: URL */
  packageName?: string;
  /** where the details a client must not see go (server paths, the loader's own messages) */
  log?: { warn(o: object, msg?: string): void };
  /**
   * The bound on one job (WHISPER_TIMEOUT_MS, WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS): a job not settled within
   * `floorMs + perAudioSecondMs x the audio's seconds`, both times the model's compute relative to base
   * (whisperComputeScale), is stopped, answered 504 and its context dropped (jobLimitMs says why these defaults).
   */
  timeout?: { floorMs?: number; perAudioSecondMs?: number };
  /** how long close() waits for the context's release (default WHISPER_CLOSE_WAIT_MS) */
  closeWaitMs?: number;
}

/** the longest close() waits for the context's release before it gives up (a job that never settled may hold it) */
export const WHISPER_CLOSE_WAIT_MS = 5_000;

/**
 * The defaults of the bound on a job, for a base-sized model (docs/performance.md, "Speech recognition (whisper)"):
 * the worst measured on a loaded 2-core machine (load 23-33, OpenMP spinning) was ~205 s of wall time for one 30-s
 * window of base.en, and a window is paid whole however short the clip. 600 s per window (20 s per audio second,
 * and as a floor for the first window) is about three times that, which a real job does not reach; a hung one is
 * still let go of within minutes rather than never.
 */
export const WHISPER_TIMEOUT_FLOOR_MS = 600_000;
export const WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS = 20_000;

// The few parts of the native API this engine uses (the binding's lib/binding.ts: WhisperContext).
interface BindingSegment {
  text: string;
  /** milliseconds */
  t0: number;
  t1: number;
}
interface BindingResult {
  language?: string;
  result: string;
  segments: BindingSegment[];
  isAborted: boolean;
}
interface BindingContext {
  transcribeData(audio: ArrayBuffer, options?: Record<string, unknown>): { stop: () => Promise<void>; promise: Promise<BindingResult> };
  release(): Promise<void>;
}
interface NativeModule {
  WhisperContext?: new (options: { filePath: string; useGpu?: boolean }) => BindingContext;
  /** the wrapper's API (@fugood/whisper.node), which a binding named by PORTICO_WHISPER_BINDING may have */
  initWhisper?: (options: { filePath: string; useGpu?: boolean }) => Promise<BindingContext>;
}

const require = createRequire(import.meta.url);

/** what the bound on a job gives when it is reached first */
const TIMED_OUT = Symbol('timed out');

/** Waits for `before` (the job ahead on the context); a client that leaves meanwhile leaves the wait at once. */
async function waitTurn(before: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return before;
  let onAbort: (() => void) | undefined;
  try {
    await Promise.race([
      before,
      new Promise<never>((_, reject) => {
        onAbort = () => reject(new EngineError('transcription aborted', 'aborted', 499));
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

/** Asks the binding to stop a job; a stop that fails or never settles is left alone (the job's bound still holds). */
function stopJob(job: { stop: () => Promise<void> }): Promise<void> {
  try {
    return Promise.resolve(job.stop()).catch(() => {});
  } catch {
    return Promise.resolve();
  }
}

/** require first (the native package, an index.node), import for an ES module (the tests' fakes on Node 20) */
async function loadBinding(spec: string): Promise<NativeModule> {
  let m: NativeModule & { default?: NativeModule };
  try {
    m = require(bindingTarget(spec)) as NativeModule;
  } catch (e) {
    if ((e as { code?: string }).code !== 'ERR_REQUIRE_ESM') throw e;
    m = (await import(spec)) as NativeModule;
  }
  const mod = m.WhisperContext || m.initWhisper ? m : m.default;
  if (typeof mod?.WhisperContext !== 'function' && typeof mod?.initWhisper !== 'function') throw new Error(`${spec} has neither WhisperContext nor initWhisper`);
  return mod;
}

function toPcm16(pcm: Float32Array): ArrayBuffer {
  const out = new Int16Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) {
    const s = Math.max(-1, Math.min(1, pcm[i]!));
    out[i] = Math.round(s < 0 ? s * 32768 : s * 32767);
  }
  return out.buffer;
}

const SPECIAL = /\[_[A-Z]+_?\d*\]|<\|[^|]*\|>/g;

/** Token-level segments (maxLen 1) -> words: a token that does not start with a space continues the word. */
export function tokensToWords(segments: readonly BindingSegment[]): TranscriptWord[] {
  const words: TranscriptWord[] = [];
  for (const s of segments) {
    const text = s.text.replace(SPECIAL, '');
    if (!text.trim()) continue;
    const start = s.t0 / 1000;
    const end = s.t1 / 1000;
    const last = words[words.length - 1];
    if (last && !/^\s/.test(text)) {
      last.word += text;
      last.end = Math.max(last.end, end);
    } else {
      words.push({ word: text.trim(), start, end: Math.max(start, end) });
    }
  }
  return words;
}

export interface WhisperHeader {
  nVocab: number;
  ftype: number;
  audioState: number;
  audioLayers: number;
  textState: number;
  textLayers: number;
}

/** What the header of a ggml whisper file says (undefined when it cannot be read, or is not one). */
export function whisperHeader(path: string): WhisperHeader | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    // magic, then 11 int32: n_vocab ... n_mels, ftype (whisper_model_load in whisper.cpp)
    const b = Buffer.alloc(48);
    if (readSync(fd, b, 0, 48, 0) < 48 || b.readUInt32LE(0) !== 0x67676d6c) return undefined;
    return {
      nVocab: b.readInt32LE(4),
      ftype: b.readInt32LE(44) % 1000,
      audioState: b.readInt32LE(12),
      audioLayers: b.readInt32LE(20),
      textState: b.readInt32LE(28),
      textLayers: b.readInt32LE(36),
    };
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Whether a ggml file holds an English-only model (the .en ones): its vocabulary size, the header's first
 * hyper-parameter (51864 english-only, 51865+ multilingual). undefined when the file cannot be read (yet).
 */
export function whisperEnglishOnly(path: string): boolean | undefined {
  const h = whisperHeader(path);
  return h ? h.nVocab < 51865 : undefined;
}

/**
 * A model's compute per window relative to base (state 512, 6 + 6 layers), from its header: the layers' matrix
 * work grows with state^2 x layers. tiny.en counts as base (never below 1); small ~4.5, medium 16, large 33,
 * large-v3-turbo ~19. A header that cannot be read, or holds no plausible dimensions, counts as base.
 */
export function whisperComputeScale(h: WhisperHeader | undefined): number {
  if (!h) return 1;
  const dims = [h.audioState, h.audioLayers, h.textState, h.textLayers];
  if (dims.some((d) => !Number.isInteger(d) || d <= 0) || h.audioState > 8192 || h.textState > 8192 || h.audioLayers > 256 || h.textLayers > 256) return 1;
  const work = h.audioState ** 2 * h.audioLayers + h.textState ** 2 * h.textLayers;
  return Math.min(100, Math.max(1, work / (512 ** 2 * 12)));
}

export function createWhisperEngine(opts: WhisperOptions): TranscriptionEngine {
  // an English-only model transcribes English only and cannot translate (whisper.cpp would silently ignore both)
  const englishOnly = opts.modelPath ? whisperEnglishOnly(opts.modelPath) === true : false;
  const packageName = opts.packageName ?? whisperPlatformPackage();
  let ctx: Promise<BindingContext> | undefined;
  // the bound on one job (see WHISPER_TIMEOUT_FLOOR_MS), scaled to the model's compute once its header is read
  let scale: number | undefined;
  const jobLimitMs = (seconds: number): number => {
    scale ??= whisperComputeScale(opts.modelPath ? whisperHeader(opts.modelPath) : undefined);
    const floor = opts.timeout?.floorMs ?? WHISPER_TIMEOUT_FLOOR_MS;
    const perSecond = opts.timeout?.perAudioSecondMs ?? WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS;
    // setTimeout's own ceiling (~24.8 days): past it, a timer fires at once
    return Math.min(2_147_483_647, Math.round(scale * (floor + perSecond * seconds)));
  };

  function context(): Promise<BindingContext> {
    if (!ctx) {
      ctx = (async () => {
        if (!opts.modelPath) throw new EngineError(`no whisper model configured: ${WHISPER_SETUP_HINT}`, 'engine_unavailable', 503);
        // what reaches a client names no server path: the loader's messages (which carry paths) go to the log
        let mod: NativeModule;
        try {
          mod = await loadBinding(packageName);
        } catch (e) {
          opts.log?.warn({ package: packageName, err: (e as Error).message }, 'the whisper binding could not be loaded');
          const why = opts.packageName ? `the binding PORTICO_WHISPER_BINDING names could not be loaded (the server log says why)` : whisperUnavailableHint();
          throw new EngineError(`A whisper model is set up, but the whisper engine cannot run on this server: ${why}; see docs/models.md.`, 'engine_unavailable', 503);
        }
        if (!existsSync(opts.modelPath)) {
          opts.log?.warn({ path: opts.modelPath }, 'whisper model file not found');
          throw new EngineError('the whisper model file is not on the server (the server log says where it was looked for); pull or configure it again', 'engine_unavailable', 503);
        }
        // an all-f32 file (ftype 0) loads, then the encoder's convolution fails an assertion in ggml (GGML_ASSERT
        // src0->type == F16), which aborts the whole process: refused here. The published files are f16 or quantized.
        if (whisperHeader(opts.modelPath)?.ftype === 0) {
          opts.log?.warn({ path: opts.modelPath }, 'whisper model file is f32 (ftype 0): refused');
          throw new EngineError(
            'the whisper model file holds f32 weights, which this whisper.cpp build cannot run (it would crash): use an f16 or quantized ggml file',
            'engine_unavailable',
            503,
          );
        }
        try {
          const params = { filePath: opts.modelPath, useGpu: opts.useGpu ?? false };
          // the native constructor loads the file synchronously (tens of ms for base.en, once per model)
          return mod.WhisperContext ? new mod.WhisperContext(params) : await mod.initWhisper!(params);
        } catch (e) {
          opts.log?.warn({ path: opts.modelPath, err: (e as Error).message }, 'whisper model could not be loaded');
          throw new EngineError('the whisper model could not be loaded (the server log says why)', 'engine_unavailable', 503);
        }
      })();
      // a failed load is retried at the next request (the user may install the package meanwhile)
      ctx.catch(() => {
        ctx = undefined;
      });
    }
    return ctx;
  }

  /**
   * A job past its bound: stopped, and its context let go of, so that the next request loads a fresh one instead
   * of queueing behind a job that may never end. Nothing here is awaited: a stop or a release that hangs as the job
   * did blocks nothing. A release refused while the job still runs (the binding's "Operation in progress") is
   * tried again once the job settles, if it ever does.
   */
  function dropContext(loading: Promise<BindingContext>, c: BindingContext, job: { promise: Promise<BindingResult> }, what: { limitMs: number; seconds: number }): void {
    if (ctx === loading) ctx = undefined;
    opts.log?.warn({ limitMs: what.limitMs, audioSeconds: what.seconds }, 'a whisper job did not settle within its bound: stopped, and its context dropped');
    const release = () => Promise.resolve().then(() => c.release());
    release().catch(() => {
      const again = () => void release().catch(() => {});
      job.promise.then(again, again);
    });
  }

  /**
   * The jobs on the context run one at a time, each after the one before it is answered. The binding runs them one
   * at a time anyway, but two handed to one context at once can deadlock it: with onNewSegments (what a streamed
   * transcription uses), two jobs on one context froze the whole process, main thread included, in 7 of 10 runs
   * here (2026-11-29; none in 7 runs one after the other; docs/performance.md). The engine says so
   * (`concurrency: 1`), and the audio scheduler gives it one turn at a time, so through the audio feature nothing
   * waits here; this chain is the guard for any other caller (a caller that does not ask the scheduler, a test, a
   * script), at the cost of one promise a job. Waiting here also means a job behind a job that never settles takes
   * the fresh context once that one's bound drops the old.
   */
  let turns: Promise<void> = Promise.resolve();

  const engine: TranscriptionEngine = {
    kind: 'whisper',
    needsPcm: true,
    canTranslate: !englishOnly,
    languages: englishOnly ? ['en'] : undefined,
    // the encoder always runs on a 30-s window: shorter audio is padded to it
    window: 30,
    // the one context runs one job at a time (see `turns`)
    concurrency: 1,
    async transcribe(req: TranscribeRequest): Promise<Transcript> {
      if (!req.pcm16k) throw new EngineError('whisper needs 16 kHz PCM (pcm16k) decoded by the audio service', 'internal_error', 500);
      if (req.signal?.aborted) throw new EngineError('transcription aborted', 'aborted', 499);
      // one job at a time on the context (see `turns`); the next one's turn comes when this one is answered
      let done!: () => void;
      const mine = new Promise<void>((resolve) => (done = resolve));
      const before = turns;
      turns = before.then(() => mine);
      try {
        await waitTurn(before, req.signal);
        return await run(req, req.pcm16k);
      } finally {
        done();
      }
    },
    async close(): Promise<void> {
      const c = ctx;
      ctx = undefined;
      if (!c) return;
      // a release held by a job that never settled (or by the binding itself) must not hold the shutdown: waited for
      // closeWaitMs at most, then left to the process's exit
      const released = await settledWithin(
        c.then((x) => x.release()),
        opts.closeWaitMs ?? WHISPER_CLOSE_WAIT_MS,
      );
      if (!released) opts.log?.warn({ waitedMs: opts.closeWaitMs ?? WHISPER_CLOSE_WAIT_MS }, 'the whisper context was not released in time at close: left to the exit');
    },
  };

  async function run(req: TranscribeRequest, pcm16k: Float32Array): Promise<Transcript> {
    const loading = context();
    const c = await loading;
    const duration = pcm16k.length / 16000;
    // once the job is answered (its result, a failure, or the bound): whatever the binding says later is dropped
    let over = false;
    const options: Record<string, unknown> = {
      // an English-only model is told so: whisper.cpp would otherwise "detect" another language in it
      language: req.language || (englishOnly ? 'en' : 'auto'),
      translate: req.task === 'translate',
      temperature: req.temperature ?? 0,
    };
    if (req.prompt) options.prompt = req.prompt;
    if (opts.threads) options.maxThreads = opts.threads;
    if (opts.fallback === false) options.temperatureInc = 0;
    if (req.wordTimestamps) {
      options.tokenTimestamps = true;
      options.maxLen = 1;
    }
    // the text as whisper decodes it (a segment at a time), for a caller that streams it
    const onText = req.onText;
    if (onText) {
      options.onNewSegments = (r: { segments?: BindingSegment[]; result?: string }) => {
        if (over || req.signal?.aborted) return;
        const delta = (r.segments ? r.segments.map((s) => s.text).join('') : (r.result ?? '')).replace(SPECIAL, '');
        if (delta) onText(delta);
      };
    }
    const job = c.transcribeData(toPcm16(pcm16k), options);
    // the client leaving stops the job; the job's promise then settles (isAborted), or the bound below ends it
    const onAbort = () => void stopJob(job);
    req.signal?.addEventListener('abort', onAbort, { once: true });
    // a job that never settles (seen once in a loaded test run: no segment, no end) would hold this request and
    // the model's one context, so every later transcription behind it, for ever: bounded by the audio's length
    const limitMs = jobLimitMs(duration);
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(() => resolve(TIMED_OUT), limitMs);
    });
    let res: BindingResult | typeof TIMED_OUT;
    try {
      res = await Promise.race([job.promise, bound]);
    } catch (e) {
      throw new EngineError(`whisper failed: ${(e as Error).message}`, 'engine_error', 502);
    } finally {
      over = true;
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    }
    if (res === TIMED_OUT) {
      void stopJob(job);
      dropContext(loading, c, job, { limitMs, seconds: duration });
      if (req.signal?.aborted) throw new EngineError('transcription aborted', 'aborted', 499);
      throw new EngineError(
        `whisper did not finish within ${Math.ceil(limitMs / 1000)} s for ${duration.toFixed(1)} s of audio; the job was stopped and the model is loaded again for the next request`,
        'upstream_timeout',
        504,
      );
    }
    if (res.isAborted || req.signal?.aborted) throw new EngineError('transcription aborted', 'aborted', 499);
    let segments: TranscriptSegment[];
    let words: TranscriptWord[] | undefined;
    if (req.wordTimestamps) {
      words = tokensToWords(res.segments).map((w) => ({ ...w, start: Math.min(w.start, duration), end: Math.min(w.end, duration) }));
      segments = groupWordsIntoSegments(words, { pauseSec: 1, maxSegmentSec: 30 });
    } else {
      // whisper's timestamps may pass the end of the audio (it decodes a padded 30-s window): clamped to it
      segments = res.segments
        .map((s) => ({ start: Math.min(s.t0 / 1000, duration), end: Math.min(s.t1 / 1000, duration), text: s.text.replace(SPECIAL, '').trim() }))
        .filter((s) => s.text.length > 0);
    }
    return {
      text: segments
        .map((s) => s.text)
        .join(' ')
        .trim(),
      language: req.task === 'translate' || englishOnly ? 'en' : res.language || req.language,
      duration,
      segments,
      words,
    };
  }
  // transcriptions under way: a retiring engine (a reload retired this model) releases its context once there are none
  let active = 0;
  const transcribe = engine.transcribe.bind(engine);
  engine.transcribe = async (req) => {
    active++;
    try {
      return await transcribe(req);
    } finally {
      active--;
    }
  };
  engine.retire = async () => {
    await whenIdle(() => active === 0);
    await engine.close();
  };
  return engine;
}
