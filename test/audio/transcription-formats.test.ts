/**
 * POST /v1/audio/transcriptions and /v1/audio/translations against a real listening Portico with the official
 * openai SDK as the client, on the built-in models (pocketsphinx, installed here and in CI).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertApiError, client, parseSrt, parseVtt, rejects, wordErrorRate } from './helpers.js';
import { ReplayDecoder } from './replay-decoder.js';

/** synthesized with voice alloy (flite slt), transcribed by pocketsphinx */
const SENTENCES = ['The weather today is sunny and warm.', "Please call me tomorrow morning at nine o'clock."];
const SENTENCE = SENTENCES.join(' ');
/** the stated bound of the round trip: at most 25 % word error (measured: 0-10 % on this sentence) */
const MAX_WER = 0.25;

const FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'] as const;
const GRANULARITIES: Array<Array<'word' | 'segment'> | undefined> = [undefined, ['segment'], ['word'], ['word', 'segment']];

/**
 * The matrix checks what Portico makes of one recognition of one sentence in every format: the decoder runs for
 * real once, on the first combination (json); every other combination, on transcriptions and translations, is that
 * same decoder run replayed (./replay-decoder.ts), everything after the decoder still real. The decoder is given the
 * same arguments whatever the response_format (the formats are rendered from its one output), so a replay is what a
 * new run gives; a request with other arguments or other bytes would find nothing to replay and run it for real.
 * Before, each of the 14 answered combinations ran the decoder again on the same bytes, then one per format family
 * and one translation did (6 runs of ~2.5 s of CPU each).
 */
describe('transcriptions and translations: every response_format x timestamp_granularities (pocketsphinx)', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  let wav: Buffer;
  let decoder: ReplayDecoder;
  before(async () => {
    decoder = new ReplayDecoder();
    t = await buildTestApp({ listen: true });
    ({ openai } = await client(t));
    wav = Buffer.from(await (await openai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input: SENTENCE, response_format: 'wav' })).arrayBuffer());
  });
  after(async () => {
    await t.close();
    decoder.close();
  });

  test('every response_format x timestamp_granularities combination on transcriptions', async () => {
    const duration = (wav.length - 44) / 48000;
    for (const format of FORMATS) {
      for (const gran of GRANULARITIES) {
        const what = `${format} + ${JSON.stringify(gran)}`;
        const file = await toFile(wav, 'speech.wav');
        const p = () =>
          openai.audio.transcriptions.create({
            file,
            model: 'whisper-1',
            response_format: format,
            ...(gran ? { timestamp_granularities: gran } : {}),
          } as OpenAI.Audio.TranscriptionCreateParamsNonStreaming);
        if (gran && format !== 'verbose_json') {
          assertApiError(await rejects(p()), 400, 'validation_error', 'timestamp_granularities', /verbose_json/);
          continue;
        }
        // a real decoder run for the first combination (json), the others replay it
        const r = (await (format === 'json' && gran === undefined ? decoder.real(p) : p())) as unknown;
        if (format === 'json') {
          const j = r as { text: string; usage: unknown };
          assert.deepEqual(Object.keys(j).sort(), ['text', 'usage'], what);
          assert.ok(wordErrorRate(SENTENCE, j.text) <= MAX_WER, what);
        } else if (format === 'text') {
          assert.equal(typeof r, 'string', what);
          assert.ok(wordErrorRate(SENTENCE, r as string) <= MAX_WER, `${what}: ${r}`);
          assert.ok(!(r as string).trim().startsWith('{'), what);
        } else if (format === 'srt' || format === 'vtt') {
          const cues = format === 'srt' ? parseSrt(r as string) : parseVtt(r as string);
          assert.ok(cues.length >= 1, what);
          assert.ok(cues[cues.length - 1].end <= duration + 0.05, `${what}: cues within the audio`);
          for (let i = 1; i < cues.length; i++) assert.ok(cues[i].start >= cues[i - 1].start, `${what}: cues in order`);
          assert.ok(wordErrorRate(SENTENCE, cues.map((c) => c.text).join(' ')) <= MAX_WER, what);
        } else {
          const v = r as OpenAI.Audio.TranscriptionVerbose & { usage: { type: string; seconds: number } };
          assert.equal((v as unknown as { task: string }).task, 'transcribe');
          assert.equal(v.language, 'english');
          assert.ok(Math.abs(v.duration - duration) < 0.01, `${what}: duration ${v.duration}`);
          assert.deepEqual(v.usage, { type: 'duration', seconds: Math.ceil(duration) });
          const wantWords = gran?.includes('word') ?? false;
          const wantSegments = !(gran && gran.length === 1 && gran[0] === 'word');
          assert.equal(v.segments !== undefined, wantSegments, `${what}: segments present = ${wantSegments}`);
          assert.equal(v.words !== undefined, wantWords, `${what}: words present = ${wantWords}`);
          if (v.segments) {
            // one segment per sentence: split at the pause between them, not after a fixed length
            assert.equal(v.segments.length, 2, `${what}: ${JSON.stringify(v.segments.map((s) => s.text))}`);
            assert.ok(wordErrorRate(SENTENCES[0], v.segments[0].text) <= 0.5, `${what}: first segment ${v.segments[0].text}`);
            assert.ok(v.segments[0].end < v.segments[1].start);
            v.segments.forEach((s, i) => {
              // every field of the SDK's TranscriptionSegment (all required there), with what pocketsphinx can tell
              assert.deepEqual(Object.keys(s).sort(), ['avg_logprob', 'compression_ratio', 'end', 'id', 'no_speech_prob', 'seek', 'start', 'temperature', 'text', 'tokens'].sort());
              assert.equal(s.id, i);
              assert.ok(s.start <= s.end && s.end <= v.duration + 0.05);
              assert.deepEqual(s.tokens, [], 'pocketsphinx decodes words, not tokens');
              assert.equal(s.temperature, 0, 'pocketsphinx decodes without sampling');
              assert.ok(s.avg_logprob < 0 && s.avg_logprob > -10, `${what}: avg_logprob ${s.avg_logprob} from the word posteriors`);
              assert.ok(s.no_speech_prob >= 0 && s.no_speech_prob < 0.5, `${what}: no_speech_prob ${s.no_speech_prob}`);
              assert.equal(typeof s.compression_ratio, 'number');
            });
            assert.ok(wordErrorRate(SENTENCE, v.segments.map((s) => s.text).join(' ')) <= MAX_WER);
          }
          if (v.words) {
            assert.ok(v.words.length >= 8, `${what}: ${v.words.length} words`);
            for (const w of v.words) assert.ok(typeof w.word === 'string' && w.start <= w.end && w.end <= v.duration + 0.05);
            for (let i = 1; i < v.words.length; i++) assert.ok(v.words[i].start >= v.words[i - 1].start);
          }
        }
      }
    }
  });

  test('every response_format x timestamp_granularities combination on translations (English speech translates to itself)', async () => {
    for (const format of FORMATS) {
      for (const gran of GRANULARITIES) {
        const what = `translation ${format} + ${JSON.stringify(gran)}`;
        const file = await toFile(wav, 'speech.wav');
        const p = () =>
          openai.audio.translations.create({
            file,
            model: 'whisper-1',
            response_format: format,
            ...(gran ? { timestamp_granularities: gran } : {}),
          } as OpenAI.Audio.TranslationCreateParams);
        if (gran && format !== 'verbose_json') {
          assertApiError(await rejects(p()), 400, 'validation_error', 'timestamp_granularities', /verbose_json/);
          continue;
        }
        if (gran?.includes('word')) {
          // verbose_json translations have no words
          assertApiError(await rejects(p()), 400, 'validation_error', 'timestamp_granularities', /translations/);
          continue;
        }
        // the same decoder run as transcribing (English speech, the same arguments): replayed
        const r = (await p()) as unknown;
        if (format === 'json') assert.ok(wordErrorRate(SENTENCE, (r as { text: string }).text) <= MAX_WER, what);
        else if (format === 'text') assert.ok(wordErrorRate(SENTENCE, r as string) <= MAX_WER, what);
        else if (format === 'srt') assert.ok(parseSrt(r as string).length >= 1, what);
        else if (format === 'vtt') assert.ok(parseVtt(r as string).length >= 1, what);
        else {
          const v = r as { task: string; language: string; duration: number; text: string; segments: unknown[]; words?: unknown };
          assert.equal(v.task, 'translate');
          assert.equal(v.language, 'english');
          assert.ok(v.segments.length >= 1);
          assert.equal(v.words, undefined);
          assert.ok(wordErrorRate(SENTENCE, v.text) <= MAX_WER);
        }
      }
    }
  });
});
