/**
 * Turn detection (`server_vad`): the voice activity detector's frame decisions made into the turn's events, by
 * OpenAI's rules. Speech starts at the first of two speech frames in a row; the turn's audio starts
 * `prefix_padding_ms` before it; speech stops once `silence_duration_ms` of frames without speech have followed
 * the last speech frame, and the turn's audio ends there (the silence included). A shorter pause inside a turn
 * is told too (`pause`): the recognizer can take the turn's audio so far while the user goes on.
 *
 * Times are milliseconds of the session's input audio (all of it, since the session began), as OpenAI counts them.
 */
import type { VoiceActivityDetector } from '../engines/types.js';
import { RECOGNIZER_RATE } from './audio.js';
import type { ServerVad } from './protocol.js';

export type TurnEvent = { type: 'start'; atMs: number; audioStartMs: number } | { type: 'pause'; atMs: number } | { type: 'stop'; atMs: number; speechEndMs: number };

/** a pause this long inside a turn lets the recognizer start on what was said so far */
export const PAUSE_MS = 240;
const START_FRAMES = 2;

export class TurnDetector {
  private frame = 0;
  private speaking = false;
  private run = 0;
  private runStart = 0;
  private lastSpeechEnd = 0;
  private paused = false;
  private readonly frameMs: number;

  constructor(
    private readonly detector: VoiceActivityDetector,
    private vad: ServerVad,
  ) {
    this.frameMs = (detector.frameSamples / RECOGNIZER_RATE) * 1000;
  }

  get name(): string {
    return this.detector.name;
  }

  /** why the detector is not what it was made as (a Silero detector whose worker stopped goes on as energy) */
  get fallbackReason(): string | undefined {
    return this.detector.fallbackReason;
  }

  get inSpeech(): boolean {
    return this.speaking;
  }

  configure(vad: ServerVad) {
    this.vad = vad;
  }

  /**
   * 16 kHz samples of the session's input, in order; `baseMs` is not needed: the detector counts every sample. The
   * decisions come from the detector's promise (Silero decides in a worker thread); the caller awaits each push
   * before the next (or its reset), as the session's events are handled one at a time.
   */
  async push(pcm16: Float32Array): Promise<TurnEvent[]> {
    return this.apply(await this.detector.push(pcm16));
  }

  /** the frames' decisions made into the turn's events */
  private apply(decisions: boolean[]): TurnEvent[] {
    const out: TurnEvent[] = [];
    for (const speech of decisions) {
      const start = this.frame * this.frameMs;
      const end = start + this.frameMs;
      this.frame++;
      if (speech) {
        if (this.run === 0) this.runStart = start;
        this.run++;
        this.lastSpeechEnd = end;
        this.paused = false;
        if (!this.speaking && this.run >= START_FRAMES) {
          this.speaking = true;
          out.push({ type: 'start', atMs: this.runStart, audioStartMs: Math.max(0, this.runStart - this.vad.prefix_padding_ms) });
        }
      } else {
        this.run = 0;
        if (!this.speaking) continue;
        const silent = end - this.lastSpeechEnd;
        if (silent >= this.vad.silence_duration_ms) {
          this.speaking = false;
          this.paused = false;
          out.push({ type: 'stop', atMs: Math.round(this.lastSpeechEnd + this.vad.silence_duration_ms), speechEndMs: this.lastSpeechEnd });
        } else if (!this.paused && silent >= PAUSE_MS) {
          this.paused = true;
          out.push({ type: 'pause', atMs: this.lastSpeechEnd });
        }
      }
    }
    return out;
  }

  /** the audio so far is forgotten (a cleared buffer): speech that was under way is not a turn any more */
  reset() {
    this.speaking = false;
    this.run = 0;
    this.paused = false;
    this.detector.reset();
  }

  /** the detector has no notion of the time that passed: keep the frame count in step with the session's audio */
  syncTo(ms: number) {
    this.frame = Math.round(ms / this.frameMs);
  }

  close() {
    this.detector.close();
  }
}
