/**
 * Neural voices: a piper (VITS) voice run by sherpa-onnx (`sherpa-onnx-node`, an optional dependency with a
 * prebuilt library for each platform, loaded at the first use). The OpenAI voice names map to the voice's
 * speakers (./speakers.ts); the text is spoken sentence by sentence, each sentence yielded as soon as it is
 * synthesized, so the first audio goes out after the first sentence, not the whole text. Each sentence is set to
 * the level every Portico voice has (../shared/loudness.ts: measured whole, as hd quality does for the formant
 * voices, since a neural voice has no fixed level to measure once).
 *
 * sherpa-onnx synthesizes on a thread of libuv's pool (generateAsync), not on the event loop. One synthesis runs
 * at a time per voice (sentences of concurrent requests take turns), as the formant voices' worker pools do.
 */
import { basename } from 'node:path';
import { EngineError, type PcmChunk, type SpeechRequest } from '../types.js';
import { clampSpeed, sentencesOf, type EmbeddedSpeechEngine } from '../shared/tts.js';
import { normalizeSentence } from '../shared/loudness.js';
import { prepareVoice, type PiperVoiceConfig } from './voice-files.js';
import { findEspeakData } from './espeak-data.js';
import { speakerTable, type SpeakerChoice } from './speakers.js';
import { SHERPA_PACKAGE, loadSherpa } from '../shared/sherpa.js';

interface SherpaTts {
  numSpeakers: number;
  sampleRate: number;
  generateAsync(req: { text: string; sid: number; speed: number }): Promise<{ samples: Float32Array; sampleRate: number }>;
}

interface SherpaModule {
  OfflineTts: { createAsync(config: object): Promise<SherpaTts> };
}

/** The sherpa-onnx module (CommonJS), loaded once, at the first voice (../shared/sherpa.ts). */
function loadSherpaForVoices(): SherpaModule {
  try {
    return loadSherpa<SherpaModule>();
  } catch (e) {
    throw new EngineError(
      `Neural voices need ${SHERPA_PACKAGE}, an optional dependency that npm installs with its prebuilt library for this platform ` +
        `(${process.platform}-${process.arch}); it could not be loaded (${(e as Error).message}). Run npm ci (without --omit=optional).`,
      'engine_unavailable',
      503,
    );
  }
}

export interface PiperEngineOptions {
  /** the piper voice (.onnx) */
  modelPath: string;
  /** its .onnx.json (default `<model>.json`) */
  configPath?: string;
  /** espeak-ng's data folder (phonemes); default: looked for (./espeak-data.ts) */
  dataDir?: string;
  /** OpenAI voice -> speaker (id or name) */
  speakers?: Readonly<Record<string, number | string>>;
  /** threads of one synthesis (default 1: a 2-core machine serves two requests at once) */
  threads?: number;
  /** longest piece of text synthesized in one call (default 240 characters) */
  maxSentenceChars?: number;
}

export interface PiperEngine extends EmbeddedSpeechEngine {
  readonly sampleRate: number;
  readonly config: PiperVoiceConfig;
  /** OpenAI voice -> speaker id */
  readonly speakerIds: Readonly<Record<string, SpeakerChoice>>;
}

const toInt16 = (f: Float32Array): Int16Array => {
  const out = new Int16Array(f.length);
  for (let i = 0; i < f.length; i++) {
    const v = Math.max(-1, Math.min(1, f[i]!)) * 32767;
    out[i] = v < 0 ? v - 0.5 : v + 0.5;
  }
  return out;
};

export async function createPiperEngine(o: PiperEngineOptions): Promise<PiperEngine> {
  const mod = loadSherpaForVoices();
  const prepared = await prepareVoice(o.modelPath, o.configPath);
  const dataDir = findEspeakData(o.dataDir, o.modelPath);
  let table: Record<string, SpeakerChoice>;
  try {
    table = speakerTable(prepared.config, o.speakers);
  } catch (e) {
    throw new EngineError(`piper voice ${basename(o.modelPath)}: ${(e as Error).message}`, 'engine_unavailable', 503);
  }
  let tts: SherpaTts;
  try {
    tts = await mod.OfflineTts.createAsync({
      model: { vits: { model: prepared.model, tokens: prepared.tokens, dataDir }, numThreads: o.threads ?? 1, provider: 'cpu', debug: 0 },
      maxNumSentences: 1,
    });
  } catch (e) {
    // sherpa-onnx's message may name the server's files: the server's log has it (the provider's factory), not the client
    throw Object.assign(new EngineError(`piper voice ${basename(o.modelPath)} could not be loaded by sherpa-onnx (the server's log says why)`, 'engine_unavailable', 503), {
      cause: e,
    });
  }
  const sampleRate = tts.sampleRate;
  // one synthesis at a time: each sentence waits for the one before it (of any request)
  let queue: Promise<unknown> = Promise.resolve();
  const generate = (text: string, sid: number, speed: number) => {
    const run = queue.then(() => tts.generateAsync({ text, sid, speed }));
    queue = run.catch(() => undefined);
    return run;
  };
  let closed = false;
  /** each sentence synthesized and yielded before the next is started: the first audio goes out after the first sentence */
  async function* speak(sentences: readonly string[], req: SpeechRequest): AsyncGenerator<PcmChunk> {
    const speaker = table[req.voice];
    if (!speaker) throw new EngineError(`Unknown voice '${req.voice}'. Known voices: ${Object.keys(table).join(', ')}`, 'invalid_voice', 400);
    if (closed) throw new EngineError('the piper voice was closed', 'engine_unavailable', 503);
    // sherpa-onnx's speed is 1 / length_scale, as OpenAI's: above 1 is faster
    const speed = clampSpeed(req.speed);
    for (const sentence of sentences) {
      if (req.signal?.aborted) return;
      const audio = await generate(sentence, speaker.id, speed);
      // a sentence with nothing espeak-ng can phonemize gives no samples
      if (!audio.samples?.length) continue;
      yield { samples: normalizeSentence(toInt16(audio.samples), sampleRate), sampleRate };
    }
  }
  return {
    kind: 'piper',
    voices: Object.keys(table),
    sampleRate,
    config: prepared.config,
    speakerIds: table,
    ready: async () => {},
    synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      return speak(sentencesOf(req.text, req.quality, o.maxSentenceChars), req);
    },
    synthesizeSentences(sentences: readonly string[], req: SpeechRequest): AsyncIterable<PcmChunk> {
      return speak(sentences, req);
    },
    async close() {
      // the native voice is freed with its object once nothing references it
      closed = true;
    },
  };
}
