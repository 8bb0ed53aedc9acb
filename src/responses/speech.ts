/**
 * Spoken answers (`modalities: ["text", "audio"]`): the message's text is spoken by Portico's own speech engine
 * sentence by sentence while the model is still writing, and the audio becomes the message's `output_audio` part.
 *
 * The responses feature does not know the audio feature (they are siblings): it names what it needs here, an
 * AnswerSpeaker, and the composition root (src/compose/runtime.ts) gives it one built from the audio engines and
 * the voice table (src/audio/answer-speaker.ts).
 */
import { AppError } from '../platform/errors.js';
import { fromEngineError } from '../api/engine-errors.js';
import { completeSentencesLength } from '../engines/shared/sentences.js';
import { EngineError } from '../engines/types.js';
import { withFlacFrameCount } from '../codec/flac.js';
import type { ModelSpec } from '../models/spec.js';
import type { MeteredUnit } from '../platform/module.js';

/** The `audio.format` values (the SDK's ChatCompletionAudioParam formats). */
export const ANSWER_AUDIO_FORMATS = ['wav', 'mp3', 'opus', 'flac', 'pcm16', 'aac'] as const;
export type AnswerAudioFormat = (typeof ANSWER_AUDIO_FORMATS)[number];

/** Defaults when the request has no `audio` object (or leaves a field out): docs/api.md, "Spoken answers". */
export const DEFAULT_ANSWER_VOICE = 'alloy';
export const DEFAULT_ANSWER_FORMAT: AnswerAudioFormat = 'mp3';

/** What a spoken part gives, in order: the text it is speaking now, and the encoded audio. */
export type SpeechPiece = { type: 'transcript'; text: string } | { type: 'audio'; bytes: Buffer };

/** One spoken part: one voice, one encoder, one container for all the text it is given. */
export interface AnswerSpeech extends AsyncIterable<SpeechPiece> {
  /** text to speak next (whole sentences, in order) */
  say(text: string): void;
  /** no more text: the pieces end once what was given is spoken */
  end(): void;
}

/** The unit a spoken answer is charged in: characters, priced by the speech model's `pricing.per_character`. */
export const SPOKEN_CHARACTERS: MeteredUnit = { unit: 'characters', price: 'per_character', on: ['speech'] };

/** The speaking dependency of the responses feature. */
export interface AnswerSpeaker {
  /** the voices `audio.voice` may name (empty when no speech model is available) */
  voices(): readonly string[];
  /** starts a spoken part; its pieces fail (EngineError) when the speech engine does */
  open(opts: { voice: string; format: AnswerAudioFormat; signal: AbortSignal }): AnswerSpeech;
  /** the speech model spoken answers are recorded under and priced by (its `characters`, operation `speech`) */
  speechModel(): Pick<ModelSpec, 'name' | 'pricing'>;
}

/** What a spoken answer writes to: the response being built (ResponseBuilder). */
export interface SpokenPartSink {
  /** the open message, if the open item is one */
  readonly openMessage: { item: { id: string } } | undefined;
  closeText(): void;
  audioStart(): void;
  audioDelta(b64: string): void;
  audioTranscriptDelta(text: string): void;
  audioDone(data?: string): void;
}

export interface AudioOutput {
  voice: string;
  format: AnswerAudioFormat;
}

/**
 * The request's `modalities` and `audio`, checked before anything runs (every error a 400 naming the parameter).
 * Undefined: a text answer.
 */
export function audioOutputOf(
  modalities: readonly string[] | null | undefined,
  audio: { voice?: string; format?: string } | null | undefined,
  speaker: AnswerSpeaker | undefined,
): AudioOutput | undefined {
  const voice = audio?.voice ?? DEFAULT_ANSWER_VOICE;
  const format = audio?.format ?? DEFAULT_ANSWER_FORMAT;
  const voices = speaker?.voices() ?? [];
  // checked even when audio is not asked for: a typo is said, not ignored
  if (audio) {
    if (voices.length && !voices.includes(voice)) {
      throw new AppError('validation_error', `Invalid value for 'audio.voice': '${voice}'. Supported voices are: ${voices.join(', ')}.`, 'audio.voice', {
        detail: 'invalid_value',
      });
    }
    // the schema refuses other formats already; this guards callers that skip it
    if (!(ANSWER_AUDIO_FORMATS as readonly unknown[]).includes(format)) {
      throw new AppError(
        'validation_error',
        `Invalid value for 'audio.format': ${JSON.stringify(format)}. Supported values are: ${ANSWER_AUDIO_FORMATS.join(', ')}.`,
        'audio.format',
        {
          detail: 'invalid_value',
        },
      );
    }
  }
  // ["audio"] alone is taken as ["text", "audio"]: the answer's text is always there (it is the transcript)
  if (!modalities?.includes('audio')) return undefined;
  if (!speaker || voices.length === 0) {
    throw new AppError('engine_unavailable', 'Spoken answers are not available on this server: no speech model (tts-1) is configured.', 'modalities');
  }
  return { voice: voice as string, format: format as AnswerAudioFormat };
}

/**
 * Drives the spoken parts of one response: gives the text of the open message to the speaker sentence by sentence
 * as it arrives, and folds what the speaker gives back into the builder (audio deltas, transcript deltas) as it
 * comes, while the model goes on writing. `finish` closes the spoken part of the open message (the caller calls it
 * before anything that ends the message: another item, the end of the response).
 */
export class SpokenAnswer {
  private speech: AnswerSpeech | undefined;
  /** the message the open spoken part belongs to */
  private itemId: string | undefined;
  /** text of the message not handed to the speaker yet (the unfinished sentence) */
  private pending = '';
  private pump: Promise<void> | undefined;
  /** bytes not sent yet (less than 3: base64 pieces must join) */
  private carry: Buffer = Buffer.alloc(0);
  /** every byte of the part, kept for WAV and FLAC only (their headers get the real lengths at the end) */
  private wav: Buffer[] | undefined;
  private failure: unknown;
  private rejectFailed!: (e: unknown) => void;
  /** rejects when the speech engine fails (never resolves): raced against the model's next event */
  readonly failed: Promise<never>;
  /** stops the speaking (close): the response ended some other way (a failure of the model, the client leaving) */
  private readonly stopper = new AbortController();
  private readonly signal: AbortSignal;

  constructor(
    private readonly builder: SpokenPartSink,
    private readonly speaker: AnswerSpeaker,
    private readonly out: AudioOutput,
    signal: AbortSignal,
  ) {
    this.signal = AbortSignal.any([signal, this.stopper.signal]);
    this.failed = new Promise<never>((_, reject) => (this.rejectFailed = reject));
    this.failed.catch(() => {});
  }

  /** Stops whatever is still being spoken (its encoder and synthesis); harmless after finish. */
  close(): void {
    this.stopper.abort(new Error('the response ended'));
  }

  /** After the builder took a text delta: that text is spoken once its sentence is complete. */
  text(delta: string): void {
    const m = this.builder.openMessage;
    if (!m) return;
    if (this.itemId !== m.item.id) this.begin(m.item.id);
    this.pending += delta;
    let n = completeSentencesLength(this.pending);
    // text that goes on without ending a sentence (a list, a run-on line) is not held back for long either
    if (n === 0 && this.pending.length > LONGEST_PENDING) n = lastBreak(this.pending, LONGEST_PENDING);
    if (n > 0) {
      this.speech!.say(this.pending.slice(0, n));
      this.pending = this.pending.slice(n);
    }
  }

  private begin(itemId: string) {
    this.itemId = itemId;
    this.pending = '';
    this.carry = Buffer.alloc(0);
    this.wav = this.out.format === 'wav' || this.out.format === 'flac' ? [] : undefined;
    this.builder.audioStart();
    const speech = this.speaker.open({ voice: this.out.voice, format: this.out.format, signal: this.signal });
    this.speech = speech;
    this.pump = (async () => {
      for await (const piece of speech) {
        if (piece.type === 'transcript') this.builder.audioTranscriptDelta(piece.text);
        else this.bytes(piece.bytes);
      }
    })().catch((e) => {
      this.failure ??= speechError(e, this.signal);
      this.rejectFailed(this.failure);
    });
  }

  private bytes(b: Buffer) {
    this.wav?.push(b);
    const all = this.carry.length ? Buffer.concat([this.carry, b]) : b;
    const whole = all.length - (all.length % 3);
    this.carry = all.subarray(whole);
    if (whole > 0) this.builder.audioDelta(all.subarray(0, whole).toString('base64'));
  }

  /**
   * The open message's text is finished: its text part is closed, the rest of its text is spoken, and the spoken
   * part is closed once all of it is (the audio of the last sentences keeps coming meanwhile). Throws the speech
   * engine's failure, if any.
   */
  async finish(): Promise<void> {
    const speech = this.speech;
    if (!speech) return this.check();
    this.speech = undefined;
    this.itemId = undefined;
    this.builder.closeText();
    if (this.pending) speech.say(this.pending);
    this.pending = '';
    speech.end();
    await this.pump;
    this.check();
    if (this.carry.length) this.builder.audioDelta(this.carry.toString('base64'));
    this.carry = Buffer.alloc(0);
    this.builder.audioDone(this.wav?.length ? withLengths(Buffer.concat(this.wav)).toString('base64') : undefined);
    this.wav = undefined;
  }

  /** Throws the speech engine's failure, if it failed. */
  check(): void {
    if (this.failure !== undefined) throw this.failure;
  }
}

/** Characters of unfinished sentence kept before it is spoken anyway (the engines' longest piece, 240). */
const LONGEST_PENDING = 240;

/** Where to cut text that has no sentence end: after the last line break, clause mark or space before `max`. */
function lastBreak(text: string, max: number): number {
  const head = text.slice(0, max);
  for (const re of [/\n(?=[^\n]*$)/, /[,;:)\]—–]\s(?=[^,;:)\]—–]*$)/, /\s(?=\S*$)/]) {
    const m = re.exec(head);
    if (m && m.index > 0) return m.index + m[0].length;
  }
  return max;
}

/** A speech engine's failure as the response's error: a script no voice reads keeps its code, anything else is the speech engine failing. */
function speechError(e: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return e;
  const err = fromEngineError(e, 'the speech engine');
  if (err.code === 'unsupported_language') return err;
  // an engine's own message is safe to show; anything else (an encoder crash) says only what failed
  return new AppError(
    'engine_error',
    e instanceof EngineError ? `The speech engine failed while speaking the answer: ${e.message}` : 'The speech engine failed while speaking the answer.',
  );
}

/**
 * A streamed WAV (lengths 0xFFFFFFFF) with its RIFF and data lengths filled in, now that they are known; a streamed
 * FLAC (total samples 0) with the count of its frames' samples.
 */
function withLengths(wav: Buffer): Buffer {
  if (wav.toString('ascii', 0, 4) === 'fLaC') return withFlacFrameCount(wav);
  if (wav.length < 44 || wav.toString('ascii', 0, 4) !== 'RIFF' || wav.toString('ascii', 36, 40) !== 'data') return wav;
  const out = Buffer.from(wav);
  out.writeUInt32LE(Math.min(0xffffffff, out.length - 8), 4);
  out.writeUInt32LE(Math.min(0xffffffff, out.length - 44), 40);
  return out;
}
