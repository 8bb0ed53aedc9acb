/**
 * Speech recognition with whisper.cpp through the optional `@fugood/whisper.node` binding (prebuilt CPU binary
 * in `@fugood/node-whisper-linux-x64`). The package is NOT a dependency of Portico: its default install pulls
 * ~240 MB of CUDA/Vulkan variants. Users who want whisper install it themselves
 * (`npm install @fugood/whisper.node --omit=optional` plus `@fugood/node-whisper-linux-x64`) and configure a
 * ggml model file. The binding is loaded with a dynamic import at the first transcription, never before.
 *
 * Gives segments, language detection (language omitted -> auto), translation to English, and word timings
 * (token timestamps, one token per segment, merged back into words and regrouped into segments).
 */
import { existsSync } from 'node:fs';
import {
  EngineError,
  type TranscribeRequest,
  type Transcript,
  type TranscriptionEngine,
  type TranscriptSegment,
  type TranscriptWord,
} from '../types.js';
import { groupWordsIntoSegments } from '../pocketsphinx/segments.js';

export const WHISPER_PACKAGE = '@fugood/whisper.node';
export const WHISPER_INSTALL_HINT = `install ${WHISPER_PACKAGE} and configure a ggml model (e.g. ggml-base.bin from whisper.cpp)`;

export interface WhisperOptions {
  /** path of a ggml whisper model file (required) */
  modelPath: string;
  /** CPU threads per transcription (default: the binding's default, up to 8) */
  threads?: number;
  useGpu?: boolean;
  /** module specifier to import, for tests (default '@fugood/whisper.node') */
  packageName?: string;
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
  transcribeData(
    audio: ArrayBuffer,
    options?: Record<string, unknown>,
  ): { stop: () => Promise<void>; promise: Promise<BindingResult> };
  release(): Promise<void>;
}
interface BindingModule {
  initWhisper(options: { filePath: string; useGpu?: boolean }): Promise<BindingContext>;
}

/** Whether the binding package can be resolved from here (cheap; does not load it). */
export function detectWhisperBinding(packageName = WHISPER_PACKAGE): boolean {
  try {
    import.meta.resolve(packageName);
    return true;
  } catch {
    return false;
  }
}

function toPcm16(pcm: Float32Array): ArrayBuffer {
  const out = new Int16Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) {
    const s = Math.max(-1, Math.min(1, pcm[i]));
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
        let mod: BindingModule;
        try {
          const m = (await import(packageName)) as BindingModule & { default?: BindingModule };
          mod = typeof m.initWhisper === 'function' ? m : (m.default as BindingModule);
        } catch (e) {
          throw new EngineError(
            `the whisper engine is not available (${packageName} could not be loaded: ${(e as Error).message.split('\n')[0]}); ${WHISPER_INSTALL_HINT}`,
            'engine_unavailable',
            503,
          );
        }
        if (!existsSync(opts.modelPath)) {
          throw new EngineError(`whisper model file not found: ${opts.modelPath}`, 'engine_unavailable', 503);
        }
        try {
          return await mod.initWhisper({ filePath: opts.modelPath, useGpu: opts.useGpu ?? false });
        } catch (e) {
          throw new EngineError(`could not load whisper model ${opts.modelPath}: ${(e as Error).message}`, 'engine_unavailable', 503);
        }
      })();
      // a failed load is retried at the next request (the user may install the package meanwhile)
      ctx.catch(() => {
        ctx = undefined;
      });
    }
    return ctx;
  }

  return {
    kind: 'whisper',
    needsPcm: true,
    canTranslate: true,
    languages: undefined,
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
        segments = res.segments
          .map((s) => ({ start: s.t0 / 1000, end: s.t1 / 1000, text: s.text.replace(SPECIAL, '').trim() }))
          .filter((s) => s.text.length > 0);
      }
      return {
        text: segments.map((s) => s.text).join(' ').trim(),
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
}
