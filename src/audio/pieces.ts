/**
 * Long audio is transcribed in pieces, each a turn of its own on the recognizer (./scheduler.ts): another key's
 * short clip then waits for one piece, not for an hour of someone else's audio, and the pieces of one request
 * can run side by side when the slots are free. The price is a recognizer start per piece (pocketsphinx: 308 s
 * of speech took 116 s of CPU whole and 119 s in 11 pieces, docs/api.md, "Fair sharing").
 *
 * Cuts are made where the audio is quietest (the 20 ms frame of least energy) near the even split, so a cut
 * falls in a pause rather than inside a word; the transcripts of the pieces are put back together with their
 * times shifted by the piece's start.
 */
import type { Transcript } from '../engines/types.js';

export const PIECE_RATE = 16000;
/** the energy of 20 ms frames decides where to cut */
const FRAME = PIECE_RATE / 50;
/** how far from the even split a cut may move, at most (and at most a quarter of a piece) */
const SLACK_SECONDS = 5;
/** pieces aim at this share of the maximum, which leaves room to move each cut */
const TARGET = 0.85;

export interface Piece {
  /** first sample */
  start: number;
  /** one past the last sample */
  end: number;
}

/**
 * Where to cut `pcm` (16 kHz) into pieces of at most `maxSeconds`: pieces of about equal length, a little under
 * the maximum (so that each cut can move to the quietest frame within a few seconds of the even split). Audio no
 * longer than `maxSeconds` is one piece.
 */
export function pieces(pcm: Float32Array, maxSeconds: number): Piece[] {
  const max = Math.round(maxSeconds * PIECE_RATE);
  if (pcm.length <= max) return [{ start: 0, end: pcm.length }];
  const n = Math.ceil(pcm.length / (max * TARGET));
  const out: Piece[] = [];
  let start = 0;
  for (let left = n; left > 1; left--) {
    const rest = pcm.length - start;
    const even = rest / left;
    const slack = Math.min(SLACK_SECONDS * PIECE_RATE, even / 4);
    // the pieces after this one must still fit: this one ends no earlier than that allows
    const from = start + Math.max(FRAME, rest - (left - 1) * max, Math.floor(even - slack));
    const to = start + Math.min(max, Math.ceil(even + slack));
    const cut = quietest(pcm, from, to, start + even);
    out.push({ start, end: cut });
    start = cut;
  }
  out.push({ start, end: pcm.length });
  return out;
}

/**
 * The middle of the 20 ms frame of least energy that starts at `from` or later and ends by `to` (a cut in
 * [from, to]); of frames as quiet (digital silence), the one nearest `target`.
 */
function quietest(pcm: Float32Array, from: number, to: number, target: number): number {
  let best = Math.min(to, Math.max(from, target));
  let bestEnergy = Infinity;
  for (let f = from; f + FRAME <= to; f += FRAME / 2) {
    let e = 0;
    for (let i = f; i < f + FRAME; i++) e += pcm[i]! * pcm[i]!;
    const middle = f + FRAME / 2;
    if (e < bestEnergy || (e === bestEnergy && Math.abs(middle - target) < Math.abs(best - target))) {
      bestEnergy = e;
      best = middle;
    }
  }
  return Math.min(to, Math.max(from, Math.round(best)));
}

/**
 * The transcripts of consecutive pieces as one: segments and words shifted by their piece's start (seconds), the
 * texts joined, the first language a piece reported.
 */
export function joinTranscripts(parts: ReadonlyArray<{ offset: number; transcript: Transcript }>, duration: number): Transcript {
  if (parts.length === 1 && parts[0]!.offset === 0) return parts[0]!.transcript;
  const shift = (x: number, by: number) => Math.round((x + by) * 1000) / 1000;
  const segments: Transcript['segments'] = [];
  const words: NonNullable<Transcript['words']> = [];
  let anyWords = false;
  const texts: string[] = [];
  let language: string | undefined;
  for (const { offset, transcript: t } of parts) {
    for (const s of t.segments) segments.push({ ...s, start: shift(s.start, offset), end: shift(s.end, offset) });
    if (t.words) {
      anyWords = true;
      for (const w of t.words) words.push({ ...w, start: shift(w.start, offset), end: shift(w.end, offset) });
    }
    const text = t.text.trim();
    if (text) texts.push(text);
    language ??= t.language;
  }
  return { text: texts.join(' '), language, duration, segments, ...(anyWords ? { words } : {}) };
}
