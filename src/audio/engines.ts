/**
 * The speech and transcription engine factories the audio module registers on the EngineRegistry.
 *
 * Speech:
 * - flite / espeak models (and the built-in tts-1, tts-1-hd, gpt-4o-mini-tts): one "embedded" engine whose
 *   voices are the six OpenAI voices; each voice is spoken by flite or espeak-ng as src/audio/voices.ts says.
 *   The flite and espeak worker pools are created on first use and shared by every embedded model.
 * - openai-compatible models with type speech: forwarded upstream (pcm), re-encoded by the audio service.
 *
 * Transcription:
 * - whisper models: whisper.cpp with the configured ggml file; pocketsphinx models: the Debian CLI;
 *   openai-compatible models with type transcription: forwarded upstream.
 * - the built-in whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe: the first configured `whisper` model's
 *   file if there is one, else pocketsphinx when installed, else 503 engine_unavailable naming what to install
 *   or configure. Checked at each request until an engine is found (installing pocketsphinx needs no restart).
 */
import type { EngineRegistry } from '../engines/registry.js';
import type { ModelSpec } from '../models/config.js';
import type { ModelRegistry } from '../models/registry.js';
import { EngineError, type PcmChunk, type SpeechEngine, type SpeechRequest, type TranscriptionEngine } from '../engines/types.js';
import { AppError } from '../platform/errors.js';
import { OPENAI_VOICES, embeddedVoiceFor, isOpenAiVoice } from './voices.js';
import { builtinOf } from './models.js';
import type { EmbeddedSpeechEngine } from '../engines/flite/index.js';

export interface AudioEngineOptions {
  env?: Record<string, string | undefined>;
  /** worker threads per embedded TTS engine (default 2: one per core here) */
  ttsPoolSize?: number;
}

/** One engine for every embedded voice: routes an OpenAI voice to flite or espeak-ng. */
export interface EmbeddedVoicesEngine extends SpeechEngine {
  /** resolves when both engines have loaded in a worker */
  ready(): Promise<void>;
}

class EmbeddedEngines {
  private flite?: Promise<EmbeddedSpeechEngine>;
  private espeak?: Promise<EmbeddedSpeechEngine>;
  private closed = false;
  constructor(private readonly poolSize: number) {}

  engine(kind: 'flite' | 'espeak'): Promise<EmbeddedSpeechEngine> {
    if (this.closed) return Promise.reject(new EngineError('the speech engines are closed', 'engine_unavailable', 503));
    if (kind === 'flite') {
      this.flite ??= import('../engines/flite/index.js').then((m) => m.createFliteEngine({ poolSize: this.poolSize }));
      return this.flite;
    }
    this.espeak ??= import('../engines/espeak/index.js').then((m) => m.createEspeakEngine({ poolSize: this.poolSize }));
    return this.espeak;
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [this.flite, this.espeak];
    this.flite = this.espeak = undefined;
    await Promise.all(all.map((p) => p?.then((e) => e.close()).catch(() => {})));
  }
}

function embeddedVoicesEngine(shared: EmbeddedEngines): EmbeddedVoicesEngine {
  return {
    kind: 'embedded',
    voices: OPENAI_VOICES,
    async ready() {
      await Promise.all([shared.engine('flite').then((e) => e.ready()), shared.engine('espeak').then((e) => e.ready())]);
    },
    async *synthesize(req: SpeechRequest): AsyncIterable<PcmChunk> {
      if (!isOpenAiVoice(req.voice)) {
        throw new EngineError(`Unknown voice '${req.voice}'. Supported voices: ${OPENAI_VOICES.join(', ')}`, 'invalid_voice', 400);
      }
      const target = embeddedVoiceFor(req.voice);
      const engine = await shared.engine(target.engine);
      yield* engine.synthesize({ ...req, voice: target.voice });
    },
    // the shared engines are closed once, by the registration's closer
    async close() {},
  };
}

export interface AudioEngines {
  /** closes the shared embedded engines (the EngineRegistry closes the rest) */
  close(): Promise<void>;
}

/** Registers the audio factories on `engines`; `models` is read to find a configured whisper model. */
export function registerAudioEngines(engines: EngineRegistry, models: ModelRegistry, opts: AudioEngineOptions = {}): AudioEngines {
  const env = opts.env ?? process.env;
  const shared = new EmbeddedEngines(opts.ttsPoolSize ?? 2);
  const embedded = embeddedVoicesEngine(shared);
  /** the built-in recognizer, shared by the three built-in names once found */
  let auto: Promise<TranscriptionEngine> | undefined;

  engines.speechFactory = async (spec: ModelSpec): Promise<SpeechEngine> => {
    switch (spec.provider) {
      case 'flite':
      case 'espeak':
        return embedded;
      case 'openai-compatible': {
        const { createOpenAICompatibleSpeechEngine } = await import('../engines/openai-compatible/audio.js');
        const voices = (spec as { voices?: unknown }).voices;
        return createOpenAICompatibleSpeechEngine({
          baseUrl: spec.base_url!,
          apiKey: spec.api_key_env ? env[spec.api_key_env] : undefined,
          upstreamModel: spec.upstream_model ?? spec.name,
          timeoutMs: spec.timeout_ms,
          voices: Array.isArray(voices) && voices.every((v) => typeof v === 'string') ? [...OPENAI_VOICES, ...(voices as string[])] : undefined,
        });
      }
      default:
        throw new AppError('engine_unavailable', `the model '${spec.name}' (provider ${spec.provider}) does not synthesize speech`, 'model');
    }
  };

  async function whisperEngine(spec: ModelSpec): Promise<TranscriptionEngine> {
    const { createWhisperEngine } = await import('../engines/whisper/index.js');
    return createWhisperEngine({ modelPath: spec.path! });
  }

  async function pocketsphinx(spec?: ModelSpec): Promise<TranscriptionEngine> {
    const { createPocketsphinxEngine, detectPocketsphinx } = await import('../engines/pocketsphinx/index.js');
    const b = (spec as { binary?: unknown } | undefined)?.binary;
    const binary = typeof b === 'string' ? b : undefined;
    const hmm = spec?.path;
    const found = detectPocketsphinx({ binary, hmm });
    if (!found.available) return Promise.reject(new AppError('engine_unavailable', `pocketsphinx is not available (${found.reason}); install it with: ${found.install}`, 'model'));
    return createPocketsphinxEngine({ binary: found.binary, flavor: found.flavor, hmm });
  }

  async function autoRecognizer(): Promise<TranscriptionEngine> {
    const whisper = models.list().find((m) => m.provider === 'whisper' && m.type === 'transcription' && m.path);
    if (whisper) return whisperEngine(whisper);
    const { detectPocketsphinx, POCKETSPHINX_INSTALL_HINT } = await import('../engines/pocketsphinx/index.js');
    const { WHISPER_INSTALL_HINT } = await import('../engines/whisper/index.js');
    const found = detectPocketsphinx();
    if (!found.available) {
      throw new AppError(
        'engine_unavailable',
        `No speech recognition engine is available: ${found.reason}. Install pocketsphinx (${POCKETSPHINX_INSTALL_HINT}), ` +
          `or configure a whisper model (provider whisper: ${WHISPER_INSTALL_HINT}), ` +
          `or configure this model with provider openai-compatible and type transcription to forward to a speech server.`,
        'model',
      );
    }
    return pocketsphinx();
  }

  engines.transcriptionFactory = async (spec: ModelSpec): Promise<TranscriptionEngine> => {
    if (builtinOf(spec) === 'auto-recognizer') {
      if (!auto) {
        auto = autoRecognizer();
        auto.catch(() => (auto = undefined));
      }
      const engine = await auto;
      // the EngineRegistry closes each name's engine; the shared one must survive until the last
      return { ...engine, kind: engine.kind, needsPcm: engine.needsPcm, canTranslate: engine.canTranslate, languages: engine.languages, transcribe: (r) => engine.transcribe(r), close: async () => {} };
    }
    switch (spec.provider) {
      case 'whisper':
        return whisperEngine(spec);
      case 'pocketsphinx':
        return pocketsphinx(spec);
      case 'openai-compatible': {
        const { createOpenAICompatibleTranscriptionEngine } = await import('../engines/openai-compatible/audio.js');
        return createOpenAICompatibleTranscriptionEngine({
          baseUrl: spec.base_url!,
          apiKey: spec.api_key_env ? env[spec.api_key_env] : undefined,
          upstreamModel: spec.upstream_model ?? spec.name,
          timeoutMs: spec.timeout_ms,
        });
      }
      default:
        throw new AppError('engine_unavailable', `the model '${spec.name}' (provider ${spec.provider}) does not transcribe speech`, 'model');
    }
  };

  return {
    async close() {
      await shared.close();
      const a = auto;
      auto = undefined;
      if (a) await a.then((e) => e.close()).catch(() => {});
    },
  };
}
