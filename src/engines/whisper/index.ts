/**
 * Speech recognition with whisper.cpp through the optional `@fugood/whisper.node` binding (prebuilt CPU binary
 * in `@fugood/node-whisper-<platform>-<arch>`). The package is NOT a dependency of Portico: its default install
 * pulls ~240 MB of CUDA/Vulkan variants. Users who want whisper install it themselves (whisperInstallCommand():
 * the binding and its CPU package for the platform, with --omit=optional) and configure or pull a ggml model file.
 * The binding is loaded with a dynamic import at the first transcription, never before.
 *
 * Gives segments, language detection (language omitted -> auto), translation to English, and word timings
 * (token timestamps, one token per segment, merged back into words and regrouped into segments).
 */
import { existsSync } from 'node:fs';
import { EngineError, type TranscribeRequest, type Transcript, type TranscriptionEngine, type TranscriptSegment, type TranscriptWord } from '../types.js';
import { groupWordsIntoSegments } from '../shared/segments.js';
import { whenIdle } from '../shared/idle.js';
import { WHISPER_INSTALL_HINT, WHISPER_PACKAGE, whisperInstallCommand } from './detect.js';

export { WHISPER_INSTALL_HINT, WHISPER_PACKAGE, WHISPER_VERSION, detectWhisperBinding, whisperInstallCommand, whisperPlatformPackage } from './detect.js';

export interface WhisperOptions {
  /** path of a ggml whisper model file (required) */
  modelPath: string;
  /** CPU threads per transcription (default: the binding's default, up to 8) */
  threads?: number;
  useGpu?: boolean;
  /** module specifier to import instead of '@fugood/whisper.node' (a binding installed elsewhere; the tests' fake) */
  packageName?: string;
  /** where the details a client must not see go (server paths, the loader's own messages) */
  log?: { warn(o: object, msg?: string): void };
}

// The few parts of the binding's API this engine uses (see @fugood/whisper.node lib/binding.ts).
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
interface BindingModule {
  initWhisper(options: { filePath: string; useGpu?: boolean }): Promise<BindingContext>;
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

export function createWhisperEngine(opts: WhisperOptions): TranscriptionEngine {
  const packageName = opts.packageName ?? WHISPER_PACKAGE;
  let ctx: Promise<BindingContext> | undefined;

  function context(): Promise<BindingContext> {
    if (!ctx) {
      ctx = (async () => {
        if (!opts.modelPath) throw new EngineError(`no whisper model configured: ${WHISPER_INSTALL_HINT}`, 'engine_unavailable', 503);
        // what reaches a client names no server path: the loader's messages (which carry paths) go to the log
        let mod: BindingModule;
        try {
          const m = (await import(packageName)) as BindingModule & { default?: BindingModule };
          mod = typeof m.initWhisper === 'function' ? m : (m.default as BindingModule);
          if (typeof mod?.initWhisper !== 'function') throw new Error(`${packageName} has no initWhisper`);
        } catch (e) {
          opts.log?.warn({ package: packageName, err: (e as Error).message }, 'the whisper binding could not be loaded');
          throw new EngineError(
            `A whisper model is set up, but the whisper engine is not installed on this server: ${whisperInstallCommand()} (in Portico's folder), then try again; see docs/models.md.`,
            'engine_unavailable',
            503,
          );
        }
        if (!existsSync(opts.modelPath)) {
          opts.log?.warn({ path: opts.modelPath }, 'whisper model file not found');
          throw new EngineError('the whisper model file is not on the server (the server log says where it was looked for); pull or configure it again', 'engine_unavailable', 503);
        }
        try {
          return await mod.initWhisper({ filePath: opts.modelPath, useGpu: opts.useGpu ?? false });
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

  const engine: TranscriptionEngine = {
    kind: 'whisper',
    needsPcm: true,
    canTranslate: true,
    languages: undefined,
    // the encoder always runs on a 30-s window: shorter audio is padded to it
    window: 30,
    async transcribe(req: TranscribeRequest): Promise<Transcript> {
      if (!req.pcm16k) throw new EngineError('whisper needs 16 kHz PCM (pcm16k) decoded by the audio service', 'internal_error', 500);
      if (req.signal?.aborted) throw new EngineError('transcription aborted', 'aborted', 499);
      const c = await context();
      const duration = req.pcm16k.length / 16000;
      const options: Record<string, unknown> = {
        language: req.language || 'auto',
        translate: req.task === 'translate',
        temperature: req.temperature ?? 0,
      };
      if (req.prompt) options.prompt = req.prompt;
      if (opts.threads) options.maxThreads = opts.threads;
      if (req.wordTimestamps) {
        options.tokenTimestamps = true;
        options.maxLen = 1;
      }
      const job = c.transcribeData(toPcm16(req.pcm16k), options);
      const onAbort = () => void job.stop().catch(() => {});
      req.signal?.addEventListener('abort', onAbort, { once: true });
      let res: BindingResult;
      try {
        res = await job.promise;
      } catch (e) {
        throw new EngineError(`whisper failed: ${(e as Error).message}`, 'engine_error', 502);
      } finally {
        req.signal?.removeEventListener('abort', onAbort);
      }
      if (res.isAborted || req.signal?.aborted) throw new EngineError('transcription aborted', 'aborted', 499);
      let segments: TranscriptSegment[];
      let words: TranscriptWord[] | undefined;
      if (req.wordTimestamps) {
        words = tokensToWords(res.segments);
        segments = groupWordsIntoSegments(words, { pauseSec: 1, maxSegmentSec: 30 });
      } else {
        segments = res.segments.map((s) => ({ start: s.t0 / 1000, end: s.t1 / 1000, text: s.text.replace(SPECIAL, '').trim() })).filter((s) => s.text.length > 0);
      }
      return {
        text: segments
          .map((s) => s.text)
          .join(' ')
          .trim(),
        language: req.task === 'translate' ? 'en' : res.language || req.language,
        duration,
        segments,
        words,
      };
    },
    async close(): Promise<void> {
      const c = ctx;
      ctx = undefined;
      if (c) await c.then((x) => x.release()).catch(() => {});
    },
  };
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
