import type { ModelSpec } from '../models/config.js';
import { AppError } from '../platform/errors.js';
import type { SpeechEngine, TextEngine, TranscriptionEngine } from './types.js';

/**
 * Engines for configured models, created on first use and shared by every request for that model.
 * Engines are loaded lazily (a model file is read only when someone asks for it) and closed at shutdown.
 */
export class EngineRegistry {
  private readonly text = new Map<string, Promise<TextEngine>>();
  private readonly speech = new Map<string, Promise<SpeechEngine>>();
  private readonly stt = new Map<string, Promise<TranscriptionEngine>>();

  constructor(private readonly env: Record<string, string | undefined> = process.env) {}

  textEngine(spec: ModelSpec): Promise<TextEngine> {
    let p = this.text.get(spec.name);
    if (!p) {
      p = this.createText(spec);
      this.text.set(spec.name, p);
      // a failed load is not cached: the next request tries again (the file may have appeared)
      p.catch(() => this.text.delete(spec.name));
    }
    return p;
  }

  private async createText(spec: ModelSpec): Promise<TextEngine> {
    switch (spec.provider) {
      case 'openai-compatible': {
        const { createOpenAICompatibleEngine } = await import('./openai-compatible/index.js');
        return createOpenAICompatibleEngine({
          baseUrl: spec.base_url!,
          apiKey: spec.api_key_env ? this.env[spec.api_key_env] : undefined,
          api: spec.api ?? 'chat.completions',
          contextWindow: spec.context_window,
          timeoutMs: spec.timeout_ms,
        });
      }
      case 'llama': {
        const { createLlamaEngine } = await import('./llama/index.js');
        try {
          // only the options the configuration sets: an undefined one must not override the engine's default
          return await createLlamaEngine({
            path: spec.path!,
            ...(spec.context_window !== undefined ? { contextSize: spec.context_window } : {}),
            ...(spec.parallel !== undefined ? { parallel: spec.parallel } : {}),
          });
        } catch (e) {
          throw new AppError('engine_unavailable', `the model '${spec.name}' could not be loaded from ${spec.path}: ${(e as Error).message}`, 'model');
        }
      }
      default:
        throw new AppError('engine_unavailable', `the model '${spec.name}' (provider ${spec.provider}) does not generate text`, 'model');
    }
  }

  /** registered by the audio module */
  speechFactory?: (spec: ModelSpec) => Promise<SpeechEngine>;
  transcriptionFactory?: (spec: ModelSpec) => Promise<TranscriptionEngine>;

  speechEngine(spec: ModelSpec): Promise<SpeechEngine> {
    let p = this.speech.get(spec.name);
    if (!p) {
      if (!this.speechFactory) return Promise.reject(new AppError('engine_unavailable', 'no speech engine is available'));
      p = this.speechFactory(spec);
      this.speech.set(spec.name, p);
      p.catch(() => this.speech.delete(spec.name));
    }
    return p;
  }

  transcriptionEngine(spec: ModelSpec): Promise<TranscriptionEngine> {
    let p = this.stt.get(spec.name);
    if (!p) {
      if (!this.transcriptionFactory) return Promise.reject(new AppError('engine_unavailable', 'no speech recognition engine is available'));
      p = this.transcriptionFactory(spec);
      this.stt.set(spec.name, p);
      p.catch(() => this.stt.delete(spec.name));
    }
    return p;
  }

  async close(): Promise<void> {
    const all = [...this.text.values(), ...this.speech.values(), ...this.stt.values()];
    this.text.clear();
    this.speech.clear();
    this.stt.clear();
    await Promise.all(all.map((p) => p.then((e) => e.close()).catch(() => {})));
  }
}
