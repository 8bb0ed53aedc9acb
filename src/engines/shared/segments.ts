import type { TranscriptSegment, TranscriptWord } from '../types.js';

export interface SegmentOptions {
  /** a silence at least this long between two words always starts a new segment (seconds, default 0.6) */
  pauseSec?: number;
  /**
   * a silence at least this long (the pause between sentences: 0.2-0.5 s in speech and in the embedded voices)
   * starts a new segment too, unless that leaves a segment shorter than `minSegmentSec` (default 0.2)
   */
  sentencePauseSec?: number;
  /** shortest segment made by a sentence pause or a split (seconds, default 1) */
  minSegmentSec?: number;
  /** a longer segment is split at its longest pause (or sentence end) until none is longer (default 12) */
  maxSegmentSec?: number;
  /** ... or has more than this many words (default 40) */
  maxWords?: number;
  /** word indexes before which a new segment must start (e.g. recognizer utterance boundaries) */
  breaksBefore?: ReadonlySet<number>;
}

/** Upper-cases the first letter of a segment's text (recognizers without punctuation give lower case). */
export function capitalizeFirst(text: string): string {
  return text.length === 0 ? text : text.charAt(0).toUpperCase() + text.slice(1);
}

/** A word that ends a sentence (recognizers that punctuate, such as whisper: "warm." "you?"). */
function endsSentence(word: string): boolean {
  return /[.!?…。！？]["'”’)\]」』]*$/.test(word.trim());
}

/**
 * Confidence of a segment from its words' posterior probabilities (when the recognizer gives them for every
 * word): `avgLogprob` = mean natural log of the probabilities; `noSpeechProb` = the probability that none of
 * the words was spoken, the product of (1 - p) (independent words assumed).
 */
export function segmentConfidence(words: readonly TranscriptWord[]): Pick<TranscriptSegment, 'avgLogprob' | 'noSpeechProb'> {
  if (words.length === 0 || words.some((w) => typeof w.probability !== 'number' || !Number.isFinite(w.probability))) return {};
  let logSum = 0;
  let none = 1;
  for (const w of words) {
    const p = Math.min(1, Math.max(1e-6, w.probability!));
    logSum += Math.log(p);
    none *= 1 - p;
  }
  return { avgLogprob: round4(logSum / words.length), noSpeechProb: round4(none) };
}

/**
 * Groups timed words into segments at pauses and sentence ends, as whisper's segments and subtitle cues are:
 * 1. a forced break (`breaksBefore`) or a long pause (`pauseSec`) always ends a segment;
 * 2. a sentence pause (`sentencePauseSec`) or a word ending a sentence ends one too, unless that would leave a
 *    segment (before or after) shorter than `minSegmentSec`;
 * 3. a segment still longer than `maxSegmentSec` (or with more than `maxWords` words) is split at its longest
 *    pause, a sentence end counting as half a second more, the middle preferred among equals; never inside a word.
 * Words must be in time order. Segment text is the words joined by spaces.
 */
export function groupWordsIntoSegments(words: readonly TranscriptWord[], opts: SegmentOptions = {}): TranscriptSegment[] {
  const pauseSec = opts.pauseSec ?? 0.6;
  const sentencePauseSec = opts.sentencePauseSec ?? 0.2;
  const minSec = opts.minSegmentSec ?? 1;
  const maxSec = opts.maxSegmentSec ?? 12;
  const maxWords = opts.maxWords ?? 40;
  // Every index below is in range: gap(i) is asked for 0 < i < words.length, dur(a, b) for 0 <= a < b <=
  // words.length, and every run, piece and split is a non-empty range [a, b) of the words.
  /** pause before word i */
  const gap = (i: number) => Math.max(0, words[i]!.start - words[i - 1]!.end);
  /** duration of words [a, b) */
  const dur = (a: number, b: number) => words[b - 1]!.end - words[a]!.start;

  // 1. hard runs
  const runs: Array<[number, number]> = [];
  let start = 0;
  for (let i = 1; i < words.length; i++) {
    if (opts.breaksBefore?.has(i) || gap(i) >= pauseSec) {
      runs.push([start, i]);
      start = i;
    }
  }
  if (words.length > 0) runs.push([start, words.length]);

  // 2. sentence pauses and sentence ends, keeping every piece at least minSec long
  const pieces: Array<[number, number]> = [];
  for (const [a, b] of runs) {
    let p = a;
    for (let i = a + 1; i < b; i++) {
      const candidate = gap(i) >= sentencePauseSec || endsSentence(words[i - 1]!.word);
      if (candidate && dur(p, i) >= minSec && dur(i, b) >= minSec) {
        pieces.push([p, i]);
        p = i;
      }
    }
    pieces.push([p, b]);
  }

  // 3. split what is still too long at its best break
  const out: Array<[number, number]> = [];
  const split = (a: number, b: number): void => {
    if (b - a < 2 || (dur(a, b) <= maxSec && b - a <= maxWords)) {
      out.push([a, b]);
      return;
    }
    let best = -1;
    let bestScore = -Infinity;
    const mid = (words[a]!.start + words[b - 1]!.end) / 2;
    for (const strict of [true, false]) {
      for (let i = a + 1; i < b; i++) {
        if (strict && (dur(a, i) < minSec || dur(i, b) < minSec)) continue;
        const score = gap(i) + (endsSentence(words[i - 1]!.word) ? 0.5 : 0) - Math.abs(words[i]!.start - mid) * 1e-3;
        if (score > bestScore) {
          bestScore = score;
          best = i;
        }
      }
      if (best > 0) break;
    }
    split(a, best);
    split(best, b);
  };
  for (const [a, b] of pieces) split(a, b);

  return out.map(([a, b]) => {
    const ws = words.slice(a, b);
    return {
      start: ws[0]!.start,
      end: ws[ws.length - 1]!.end,
      text: capitalizeFirst(ws.map((w) => w.word.trim()).join(' ')),
      ...segmentConfidence(ws),
    };
  });
}

function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}
