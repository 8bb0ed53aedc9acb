/**
 * Recognizes audio that another feature holds as PCM (a realtime session's turns): the listening dependency the
 * realtime feature names (src/realtime/service.ts, RealtimeEars), built from the audio engines and given to it by
 * the composition root. Any transcription model Portico serves hears it: the built-in ones (whisper, else
 * pocketsphinx), a configured whisper model, or an upstream (which gets the audio as a WAV file).
 */
import type { ModelRegistry } from '../models/registry.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import { encodeWav, floatToInt16, TRANSCRIPTION_SAMPLE_RATE } from '../codec/index.js';
import type { AudioEngines } from './engines.js';

export class PcmListenerService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly engines: AudioEngines,
  ) {}

  spec(model: string): ModelSpec {
    return this.models.require(model, 'transcription');
  }

  async transcribe(o: {
    model: string;
    pcm16k: Float32Array;
    language?: string;
    prompt?: string;
    signal: AbortSignal;
    onText?: (delta: string) => void;
  }): Promise<{ text: string }> {
    const spec = this.spec(o.model);
    const engine = await this.engines.transcription(spec);
    const file = { bytes: engine.needsPcm ? Buffer.alloc(0) : encodeWav(floatToInt16(o.pcm16k), TRANSCRIPTION_SAMPLE_RATE), filename: 'audio.wav', mimeType: 'audio/wav' };
    const t = await engine.transcribe({
      model: upstreamName(spec),
      file,
      pcm16k: o.pcm16k,
      task: 'transcribe',
      language: o.language,
      prompt: o.prompt,
      wordTimestamps: false,
      signal: o.signal,
      onText: o.onText,
    });
    return { text: t.text };
  }
}
