import type { TranscriptSegment, TranscriptWord } from '../types.js';

export interface SegmentOptions {
  /** a silence at least this long between two words starts a new segment (seconds, default 0.6) */
  pauseSec?: number;
  /** a segment is closed before it grows longer than this (seconds, default 12) */
  maxSegmentSec?: number;
  /** ... or has more than this many words (default 40) */
  maxWords?: number;
  /** word indexes before which a new segment must start (e.g. recognizer utterance boundaries) */
  breaksBefore?: ReadonlySet<number>;
}

/** Upper-cases the first letter of a segment's text (recognizers without punctuation give lower case). */
export function capitalizeFirst(text: string): string {
  return text.length === 0 ? text : text[0].toUpperCase() + text.slice(1);
}

/**
 * Groups timed words into segments: a new segment starts after a pause, at a forced break, or when the
 * current one gets too long. Words must be in time order. Segment text is the words joined by spaces.
 */
export function groupWordsIntoSegments(words: readonly TranscriptWord[], opts: SegmentOptions = {}): TranscriptSegment[] {
  const pauseSec = opts.pauseSec ?? 0.6;
  const maxSegmentSec = opts.maxSegmentSec ?? 12;
  const maxWords = opts.maxWords ?? 40;
  const segments: TranscriptSegment[] = [];
  let current: TranscriptWord[] = [];
  const flush = () => {
    if (current.length === 0) return;
    segments.push({
      start: current[0].start,
      end: current[current.length - 1].end,
      text: capitalizeFirst(current.map((w) => w.word.trim()).join(' ')),
    });
    current = [];
  };
  words.forEach((w, i) => {
    if (current.length > 0) {
      const prev = current[current.length - 1];
      if (
        opts.breaksBefore?.has(i) ||
        w.start - prev.end >= pauseSec ||
        w.end - current[0].start > maxSegmentSec ||
        current.length >= maxWords
      ) {
        flush();
      }
    }
    current.push(w);
  });
  flush();
  return segments;
}
