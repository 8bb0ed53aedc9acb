/**
 * Speaks the answers of /v1/responses asked for with modalities audio: the speaking dependency the responses
 * feature names (src/responses/speech.ts, AnswerSpeaker), built from the audio engines and the voice table, and
 * given to it by the composition root. The two features do not import each other: this class has the shape the
 * responses feature asks for.
 *
 * The voice is the speech model `tts-1` (the embedded voices unless the model file replaces it): the same voices
 * as /v1/audio/speech, at its quality (standard: audio as early as possible), priced by its `pricing`.
 * One spoken part is one encoder and one container, fed sentence by sentence as the text arrives.
 */
import type { ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
import type { PcmChunk, SpeechEngine } from '../engines/types.js';
import { encodeSpeech, type SpeechFormat } from '../codec/index.js';
import { AsyncChannel } from '../platform/async-channel.js';
import type { AudioEngines } from './engines.js';
import { isEmbeddedSpeech, speechQualityOf } from './models.js';
import type { Ticket } from './scheduler.js';
import { voicesOf } from './service.js';

/** the queue of the speech scheduler every spoken answer takes its turns in */
const SPOKEN_ANSWERS = '(spoken answers)';

/** The speech model answers are spoken by. */
export const ANSWER_SPEECH_MODEL = 'tts-1';

type AnswerFormat = 'wav' | 'mp3' | 'opus' | 'flac' | 'pcm16' | 'aac';
type Piece = { type: 'transcript'; text: string } | { type: 'audio'; bytes: Buffer };

const CODEC_FORMAT: Record<AnswerFormat, SpeechFormat> = { wav: 'wav', mp3: 'mp3', opus: 'opus', flac: 'flac', pcm16: 'pcm', aac: 'aac' };

export class AnswerSpeakerService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly engines: AudioEngines,
  ) {}

  private spec(): ModelSpec | undefined {
    const s = this.models.get(ANSWER_SPEECH_MODEL);
    return s?.type === 'speech' ? s : undefined;
  }

  voices(): readonly string[] {
    const s = this.spec();
    return s ? voicesOf(s) : [];
  }

  speechModel(): Pick<ModelSpec, 'name' | 'pricing'> {
    const s = this.spec();
    return s ?? { name: ANSWER_SPEECH_MODEL };
  }

  /** `model`: another speech model than tts-1 (a realtime pipeline's); `speed`: as /audio/speech's */
  open(opts: { voice: string; format: AnswerFormat; signal: AbortSignal; model?: string; speed?: number }): AnswerSpeechSession {
    const spec = opts.model !== undefined ? this.speechSpec(opts.model) : this.spec();
    const engine = spec ? this.engines.speech(spec) : Promise.reject(new Error(`no speech model ${opts.model ?? ANSWER_SPEECH_MODEL}`));
    // on the embedded voices, spoken answers take their turns beside /audio/speech: all of them as one queue (the
    // responses feature does not say whose answer it is), never refused (the answer is already under way)
    const turns = spec && isEmbeddedSpeech(spec) ? this.engines.speechQueue.admit(SPOKEN_ANSWERS, 0, { unchecked: true }) : undefined;
    return new AnswerSpeechSession(engine, opts.voice, CODEC_FORMAT[opts.format], spec ? speechQualityOf(spec) : 'standard', opts.signal, turns, opts.speed);
  }

  /** the speech model of that name (404 model_not_found when there is none) */
  speechSpec(model: string): ModelSpec {
    return this.models.require(model, 'speech');
  }

  /** the voices a speech model speaks */
  voicesOf(model: string): readonly string[] {
    return voicesOf(this.speechSpec(model));
  }
}

/**
 * One spoken part. Text given with `say` is synthesized in order (a `transcript` piece when each text starts)
 * and encoded by one encoder into one container, whose bytes come out as `audio` pieces as they are made.
 * Nothing comes out as audio before the engine made real samples (container headers wait), so text with nothing
 * speakable gives no audio at all rather than an empty container. A failure of the engine or the encoder ends
 * the pieces with that error; the signal stops everything.
 */
export class AnswerSpeechSession implements AsyncIterable<Piece> {
  private readonly input = new AsyncChannel<string>();
  private readonly out: AsyncChannel<Piece>;

  constructor(engine: Promise<SpeechEngine>, voice: string, format: SpeechFormat, quality: 'standard' | 'hd', signal: AbortSignal, turns?: Ticket, speed = 1) {
    const stop = new AbortController();
    const sig = AbortSignal.any([signal, stop.signal]);
    const out = new AsyncChannel<Piece>({ signal, onReturn: () => stop.abort() });
    this.out = out;
    const input = this.input;
    let samples = 0;
    async function* pcm(): AsyncGenerator<PcmChunk> {
      const e = await engine;
      for await (const text of input) {
        out.push({ type: 'transcript', text });
        for await (const c of e.synthesize({ text, voice, speed, quality, turns, signal: sig })) {
          samples += c.samples.length;
          yield c;
        }
      }
    }
    void (async () => {
      // the encoder is started after the current turn: the text event that opened this part is written first
      await new Promise((r) => setImmediate(r));
      const held: Buffer[] = [];
      for await (const bytes of encodeSpeech(pcm(), format, sig)) {
        if (samples === 0) held.push(bytes);
        else out.push({ type: 'audio', bytes: held.length ? Buffer.concat([...held.splice(0), bytes]) : bytes });
      }
      if (samples > 0 && held.length) out.push({ type: 'audio', bytes: Buffer.concat(held) });
      out.end();
    })()
      .catch((e: unknown) => {
        stop.abort();
        input.return();
        out.fail(e);
      })
      .finally(() => turns?.close());
  }

  say(text: string): void {
    this.input.push(text);
  }

  end(): void {
    this.input.end();
  }

  [Symbol.asyncIterator](): AsyncIterator<Piece> {
    return this.out;
  }
}
