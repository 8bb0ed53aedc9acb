/**
 * Issue 26: a WAV or FLAC that is not streamed carries its real length in its header (a streamed WAV says 2^31
 * frames, which Python's `wave` believes; a streamed FLAC has no total samples, so ffprobe finds no duration).
 * Sent whole: a one-sentence /v1/audio/speech answer (docs/api.md, "Lengths in WAV and FLAC headers"), and the codec
 * asked for whole audio. Checked with the readers people use: Python's `wave`, ffprobe, and ffmpeg's own FLAC
 * written to a file (where it can seek back and fill in the header itself).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import type { PcmChunk } from '../../src/engines/types.js';
import { encodeSpeech, flacTotalSamples, type SpeechFormat } from '../../src/codec/index.js';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import { client } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'portico-speech-length-'));
let n = 0;
function file(bytes: Buffer, ext: string): string {
  const p = join(dir, `${n++}.${ext}`);
  writeFileSync(p, bytes);
  return p;
}

/** Python's wave module on the file: [nframes, framerate], as a Python program reading it would see them. */
function pythonWave(bytes: Buffer): [number, number] {
  const out = execFileSync('python3', ['-c', 'import sys, wave\nw = wave.open(sys.argv[1])\nprint(w.getnframes(), w.getframerate())', file(bytes, 'wav')]).toString();
  const [frames, rate] = out.trim().split(' ').map(Number);
  return [frames!, rate!];
}

/** ffprobe's duration of the container (what it reads from the header), NaN when it finds none. */
function ffprobeDuration(bytes: Buffer, ext: string): number {
  return Number(
    execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'format=duration', '-of', 'csv=p=0', file(bytes, ext)])
      .toString()
      .trim(),
  );
}

/** The samples the audio decodes to (s16le, mono, 24 kHz). */
function decode(bytes: Buffer, ext: string): Buffer {
  return execFileSync('ffmpeg', ['-v', 'error', '-i', file(bytes, ext), '-f', 's16le', '-ac', '1', '-ar', '24000', '-']);
}

/** ffmpeg's own FLAC of these samples, written to a file: it seeks back and fills STREAMINFO in. */
function ffmpegFlacFile(pcm: Buffer): Buffer {
  const raw = file(pcm, 'raw');
  const out = join(dir, `${n++}.flac`);
  execFileSync('ffmpeg', ['-v', 'error', '-f', 's16le', '-ar', '24000', '-ac', '1', '-i', raw, '-c:a', 'flac', '-compression_level', '5', out]);
  return readFileSync(out);
}

/** STREAMINFO's MD5 (bytes 26-41 of the file). */
const md5Of = (flac: Buffer) => flac.subarray(26, 42).toString('hex');

function assertExactWav(bytes: Buffer, what: string) {
  assert.equal(bytes.toString('ascii', 0, 4), 'RIFF', what);
  assert.equal(bytes.toString('ascii', 36, 40), 'data', what);
  assert.equal(bytes.readUInt32LE(4), bytes.length - 8, `${what}: RIFF size`);
  assert.equal(bytes.readUInt32LE(40), bytes.length - 44, `${what}: data size`);
  const [frames, rate] = pythonWave(bytes);
  assert.equal(rate, 24000, what);
  assert.equal(frames, (bytes.length - 44) / 2, `${what}: Python's wave reads the real number of frames`);
}

async function assertExactFlac(bytes: Buffer, what: string) {
  const pcm = decode(bytes, 'flac');
  const samples = pcm.length / 2;
  assert.ok(samples > 24000 * 0.5, `${what}: ${samples} samples`);
  assert.equal(flacTotalSamples(bytes), samples, `${what}: STREAMINFO total samples`);
  const seconds = samples / 24000;
  const probed = ffprobeDuration(bytes, 'flac');
  assert.ok(Math.abs(probed - seconds) <= 0.05, `${what}: ffprobe says ${probed} s, the audio lasts ${seconds} s`);
  // what ffmpeg writes itself when it can seek: the same count, the same MD5 (a decoder's check of its output)
  const own = ffmpegFlacFile(pcm);
  assert.equal(flacTotalSamples(own), samples, `${what}: ffmpeg's count`);
  assert.equal(md5Of(bytes), md5Of(own), `${what}: STREAMINFO MD5 as ffmpeg computes it`);
  assert.notEqual(md5Of(bytes), '0'.repeat(32));
}

after(() => rmSync(dir, { recursive: true, force: true }));

describe('POST /v1/audio/speech: a one-sentence answer is sent whole, with exact lengths', () => {
  let t: TestApp & { url?: string };
  let openai: OpenAI;
  before(async () => {
    t = await buildTestApp({ listen: true, runtime: NO_VOICE_WARM_UP });
    ({ openai } = await client(t));
  });
  after(() => t.close());

  const speak = async (input: string, format: 'wav' | 'flac', model = 'tts-1') =>
    Buffer.from(await (await openai.audio.speech.create({ model, voice: 'alloy', input, response_format: format })).arrayBuffer());

  test('WAV: RIFF and data sizes are the real ones; Python’s wave reads the real frame count (tts-1 and tts-1-hd, a flite and an espeak voice)', async () => {
    assertExactWav(await speak('The birch canoe slid on the smooth planks.', 'wav'), 'tts-1 alloy');
    assertExactWav(await speak('Glue the sheet to the dark blue background.', 'wav', 'tts-1-hd'), 'tts-1-hd alloy');
    const ash = Buffer.from(
      await (await openai.audio.speech.create({ model: 'tts-1', voice: 'ash', input: 'It is easy to tell the depth of a well.', response_format: 'wav' })).arrayBuffer(),
    );
    assertExactWav(ash, 'tts-1 ash');
  });

  test('FLAC: STREAMINFO has the total samples and MD5; ffprobe finds the duration within 50 ms', async () => {
    await assertExactFlac(await speak('The birch canoe slid on the smooth planks.', 'flac'), 'tts-1');
    await assertExactFlac(await speak('Rice is often served in round bowls.', 'flac', 'tts-1-hd'), 'tts-1-hd');
  });

  test('several sentences stream from the first, and say "length unknown" as OpenAI’s streamed audio does', async () => {
    const input = 'The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. It is easy to tell the depth of a well.';
    const wav = await speak(input, 'wav');
    assert.equal(wav.readUInt32LE(4), 0xffffffff);
    assert.equal(wav.readUInt32LE(40), 0xffffffff);
    const flac = await speak(input, 'flac');
    assert.equal(flacTotalSamples(flac), 0, 'streamed FLAC: total samples unknown');
  });
});

describe('encodeSpeech with whole: exact headers from the codec', () => {
  /** 1.3 s of speech-like chunks at two engine rates (the resampler joins them) */
  async function* chunks(): AsyncGenerator<PcmChunk> {
    for (const [rate, seconds] of [
      [16000, 0.5],
      [22050, 0.8],
    ] as const) {
      const s = new Int16Array(Math.round(rate * seconds));
      for (let i = 0; i < s.length; i++) s[i] = Math.round(6000 * Math.sin((2 * Math.PI * 300 * i) / rate) + 2000 * Math.sin((2 * Math.PI * 1234 * i) / rate));
      yield { samples: s, sampleRate: rate };
    }
  }
  const collect = async (format: SpeechFormat, whole: boolean) => {
    const parts: Buffer[] = [];
    for await (const b of encodeSpeech(chunks(), format, undefined, { whole })) parts.push(b);
    return { bytes: Buffer.concat(parts), parts: parts.length };
  };

  test('WAV: one buffer, exact sizes, the same samples as the streamed WAV', async () => {
    const whole = await collect('wav', true);
    assert.equal(whole.parts, 1);
    assertExactWav(whole.bytes, 'codec');
    const streamed = await collect('wav', false);
    assert.equal(streamed.bytes.readUInt32LE(40), 0xffffffff);
    assert.deepEqual(whole.bytes.subarray(44), streamed.bytes.subarray(44));
    assert.ok(Math.abs((whole.bytes.length - 44) / 2 / 24000 - 1.3) < 0.01);
  });

  test('FLAC: STREAMINFO completed (count and MD5 as ffmpeg writes them to a file); streamed: 0', async () => {
    const whole = await collect('flac', true);
    assert.equal(whole.parts, 1);
    await assertExactFlac(whole.bytes, 'codec');
    assert.equal(flacTotalSamples((await collect('flac', false)).bytes), 0);
  });

  test('streamed or whole, a FLAC decodes to exactly the samples fed, from the first (ffmpeg once dropped the first 40 ms)', async () => {
    const fed = (await collect('wav', true)).bytes.subarray(44);
    for (const whole of [false, true]) assert.ok(decode((await collect('flac', whole)).bytes, 'flac').equals(fed), `whole: ${whole}`);
  });
});
