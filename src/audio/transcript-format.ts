/**
 * Transcript -> the five response formats of /v1/audio/transcriptions and /v1/audio/translations, shaped as
 * OpenAI shapes them (shared/reference/audio-wire.md):
 * - json: {"text", "usage": {"type": "duration", "seconds"}} (OpenAI's whisper-1 adds the same usage object)
 * - text: the bare text and a newline, text/plain
 * - srt: numbered cues `1\n00:00:00,000 --> 00:00:03,000\ntext\n\n`, text/plain
 * - vtt: `WEBVTT\n\n` then cues `00:00:00.000 --> 00:00:03.000\ntext\n\n`, text/vtt
 * - verbose_json: task, language (full lower-case name), duration, text, segments[] (whisper's fields),
 *   words[] when asked, usage. With timestamp_granularities [word] alone: words and no segments.
 *
 * Segments are the engine's (pocketsphinx and whisper word timings are grouped at pauses and sentence ends by
 * src/engines/shared/segments.ts). Every field of the SDK's TranscriptionSegment is required there, so all are
 * sent; each is what the engine says, or computed as whisper defines it (docs/api.md lists the sources):
 * `tokens` the engine's token ids ([] from pocketsphinx, which decodes words), `temperature` the one the segment
 * was decoded at (pocketsphinx: 0), `avg_logprob` / `no_speech_prob` from the word posteriors, `compression_ratio`
 * and `seek` computed from the text and the start time. Only an engine that reports no confidence at all (the
 * whisper.cpp binding) leaves avg_logprob and no_speech_prob at 0.
 */
import { deflateSync } from 'node:zlib';
import type { Transcript, TranscriptSegment } from '../engines/types.js';
import { languageName } from '../engines/shared/languages.js';

export type ResponseFormat = 'json' | 'text' | 'srt' | 'verbose_json' | 'vtt';
export type Granularity = 'word' | 'segment';

export interface FormatOptions {
  task: 'transcribe' | 'translate';
  format: ResponseFormat;
  /** the granularities asked for (verbose_json); default [segment] */
  granularities: Granularity[];
  /** seconds of audio (the decoded length when known) */
  duration: number;
  /** the request's temperature, reported in segments when the engine does not say */
  temperature: number;
  /** ISO-639-1 code to report when the engine does not say */
  language?: string;
}

export interface FormattedBody {
  contentType: string;
  body: string | Record<string, unknown>;
}

/** Seconds billed and reported in `usage`: whole seconds rounded up, as OpenAI does. */
export function usageSeconds(duration: number): number {
  return Math.max(0, Math.ceil(Math.round(duration * 1000) / 1000));
}

function pad(n: number, w: number): string {
  return String(n).padStart(w, '0');
}

/** 3.5 -> "00:00:03,500" (srt) or "00:00:03.500" (vtt). */
export function timestamp(seconds: number, sep: ',' | '.'): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  return `${pad(h, 2)}:${pad(m, 2)}:${pad(s, 2)}${sep}${pad(ms % 1000, 3)}`;
}

/** Segments to show: the engine's, or one segment over the whole audio when it gave text only. */
export function displaySegments(t: Transcript, duration: number): TranscriptSegment[] {
  const segs = t.segments.filter((s) => s.text.trim() !== '');
  if (segs.length > 0) return segs;
  if (t.text.trim() === '') return [];
  return [{ start: 0, end: duration, text: t.text.trim() }];
}

/** Cue text must not contain a blank line (it would end the cue) nor "-->" (vtt). */
function cueText(s: string): string {
  return s
    .trim()
    .replace(/\r\n?/g, '\n')
    .replace(/\n\s*\n+/g, '\n')
    .replace(/-->/g, '->');
}

export function toSrt(segs: TranscriptSegment[]): string {
  return segs.map((s, i) => `${i + 1}\n${timestamp(s.start, ',')} --> ${timestamp(Math.max(s.end, s.start), ',')}\n${cueText(s.text)}\n\n`).join('');
}

export function toVtt(segs: TranscriptSegment[]): string {
  return 'WEBVTT\n\n' + segs.map((s) => `${timestamp(s.start, '.')} --> ${timestamp(Math.max(s.end, s.start), '.')}\n${cueText(s.text)}\n\n`).join('');
}

/** whisper's compression ratio: text bytes / zlib-compressed bytes. */
export function compressionRatio(text: string): number {
  const b = Buffer.from(text, 'utf8');
  if (b.length === 0) return 0;
  return Math.round((b.length / deflateSync(b).length) * 1e6) / 1e6;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function formatTranscript(t: Transcript, o: FormatOptions): FormattedBody {
  const text = t.text.trim();
  const usage = { type: 'duration', seconds: usageSeconds(o.duration) };
  switch (o.format) {
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: text + '\n' };
    case 'srt':
      return { contentType: 'text/plain; charset=utf-8', body: toSrt(displaySegments(t, o.duration)) };
    case 'vtt':
      return { contentType: 'text/vtt; charset=utf-8', body: toVtt(displaySegments(t, o.duration)) };
    case 'json':
      return { contentType: 'application/json; charset=utf-8', body: { text, usage } };
    case 'verbose_json': {
      const words = o.task === 'transcribe' && o.granularities.includes('word');
      const segmentsToo = !words || o.granularities.includes('segment');
      const body: Record<string, unknown> = {
        task: o.task,
        language: languageName(t.language ?? o.language ?? 'en'),
        duration: round3(o.duration),
        text,
      };
      if (segmentsToo) {
        body.segments = displaySegments(t, o.duration).map((s, id) => ({
          id,
          seek: Math.floor(s.start / 30) * 3000,
          start: round3(s.start),
          end: round3(Math.max(s.end, s.start)),
          text: ' ' + s.text.trim(),
          tokens: s.tokens ?? [],
          temperature: s.temperature ?? o.temperature,
          avg_logprob: s.avgLogprob ?? 0,
          compression_ratio: s.compressionRatio ?? compressionRatio(s.text.trim()),
          no_speech_prob: s.noSpeechProb ?? 0,
        }));
      }
      if (words) body.words = (t.words ?? []).map((w) => ({ word: w.word, start: round3(w.start), end: round3(Math.max(w.end, w.start)) }));
      body.usage = usage;
      return { contentType: 'application/json; charset=utf-8', body };
    }
  }
}
