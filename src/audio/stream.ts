/**
 * The streamed audio answers, as OpenAI sends them (Server-Sent Events, `data: <json>` lines, no `[DONE]`):
 * - transcriptions with `stream=true`: `transcript.text.delta` {delta} as the recognizer produces text, then
 *   `transcript.text.done` {text, usage};
 * - speech with `stream_format: "sse"`: `speech.audio.delta` {audio: base64 of the encoded bytes}, then
 *   `speech.audio.done` {usage}.
 * An error after the first event is an `error` event whose `error` is the OpenAI error object (the official SDK's
 * stream parser throws an APIError on a `data.error`).
 *
 * OrderedText turns what the recognizer says into deltas whose concatenation is the joined transcript: the pieces
 * of long audio (./pieces.ts) run side by side and end in any order, but their text goes out in the order of the
 * audio, each piece's text trimmed and separated from the previous one by one space (as joinTranscripts joins them).
 */

export interface TranscriptTextDelta {
  type: 'transcript.text.delta';
  delta: string;
}

export interface TranscriptTextDone {
  type: 'transcript.text.done';
  text: string;
  /** what the request is charged: seconds of audio, whole seconds rounded up (as the non-streamed answer's usage) */
  usage: { type: 'duration'; seconds: number };
}

export type TranscriptEvent = TranscriptTextDelta | TranscriptTextDone;

export interface SpeechAudioDelta {
  type: 'speech.audio.delta';
  /** base64 of the next bytes of the audio file, in the response_format asked for */
  audio: string;
}

export interface SpeechAudioDone {
  type: 'speech.audio.done';
  /**
   * OpenAI's token counts are 0: speech is billed per character here, and `characters` says how many
   * (docs/api.md, "Streamed audio").
   */
  usage: { input_tokens: number; output_tokens: number; total_tokens: number; characters: number };
}

export type SpeechEvent = SpeechAudioDelta | SpeechAudioDone;

interface PieceText {
  /** what the engine said so far through onText (raw) */
  raw: string;
  /** the final text of the piece, once recognized */
  final?: string;
  /** the part of this piece's (trimmed) text already sent */
  sent: string;
  /** the engine's deltas stopped agreeing with what was sent: nothing more of it is sent before its final text */
  diverged: boolean;
}

export class OrderedText {
  private readonly parts: PieceText[];
  /** the first piece not completely sent */
  private head = 0;
  /** everything sent, in order: the transcript's text once every piece is done */
  private all = '';

  constructor(
    count: number,
    private readonly emit: (delta: string) => void,
  ) {
    this.parts = Array.from({ length: count }, () => ({ raw: '', sent: '', diverged: false }));
  }

  /** the engine produced more text for piece `i` */
  delta(i: number, d: string): void {
    const p = this.parts[i];
    if (!p || p.final !== undefined || d === '') return;
    p.raw += d;
    if (i === this.head) this.send(p, p.raw.trim());
  }

  /** piece `i` is recognized: its final text */
  done(i: number, text: string): void {
    const p = this.parts[i];
    if (!p || p.final !== undefined) return;
    p.final = text.trim();
    while (this.head < this.parts.length) {
      const h = this.parts[this.head]!;
      if (h.final === undefined) {
        // the next piece may already have said something: it goes out now
        this.send(h, h.raw.trim());
        return;
      }
      this.send(h, h.final);
      this.head++;
    }
  }

  /** the concatenation of every delta sent */
  get text(): string {
    return this.all;
  }

  /** sends what `visible` (this piece's text so far, trimmed) adds to what was sent of it */
  private send(p: PieceText, visible: string): void {
    if (p.diverged && p.final === undefined) return;
    if (!visible.startsWith(p.sent)) {
      // an engine that revised its words: what was sent stays, the rest waits for the final text (which, if it
      // does not continue what was sent either, is not sent: a stream cannot take words back)
      p.diverged = true;
      return;
    }
    const more = visible.slice(p.sent.length);
    if (more === '') return;
    // one space between pieces, as joinTranscripts puts it
    const sep = p.sent === '' && this.all !== '' ? ' ' : '';
    p.sent = visible;
    this.all += sep + more;
    this.emit(sep + more);
  }
}
