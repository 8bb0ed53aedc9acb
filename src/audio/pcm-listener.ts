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
import type { TranscriptionEngine } from '../engines/types.js';

export class PcmListenerService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly engines: AudioEngines,
  ) {}

  spec(model: string): ModelSpec {
    return this.models.require(model, 'transcription');
  }

  /**
   * `key`: whose audio it is. On an embedded recognizer (shared by every key) it takes its turn in that key's queue of
   * the transcription scheduler, beside /audio/transcriptions (never refused: the session's turn is under way).
   */
  async transcribe(o: Heard & { model: string; key: string }): Promise<{ text: string }> {
    const spec = this.spec(o.model);
    const engine = await this.engines.transcription(spec);
    const seconds = o.pcm16k.length / TRANSCRIPTION_SAMPLE_RATE;
    const ticket = engine.needsPcm ? this.engines.transcriptionQueue.admit(o.key, seconds, { unchecked: true, lane: this.engines.laneOf(engine) }) : undefined;
    try {
      const turn = await ticket?.step(seconds, o.signal);
      let completed = false;
      try {
        const text = await recognize(engine, spec, o);
        completed = true;
        return text;
      } finally {
        turn?.done(completed);
      }
    } finally {
      ticket?.close();
    }
  }
}

interface Heard {
  pcm16k: Float32Array;
  language?: string;
  prompt?: string;
  signal: AbortSignal;
  onText?: (delta: string) => void;
}

async function recognize(engine: TranscriptionEngine, spec: ModelSpec, o: Heard): Promise<{ text: string }> {
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
