/**
 * The codec layer: resampling, streamed WAV, one ffmpeg encoder per response for mp3/opus/aac/flac,
 * decoding uploads, with both the system ffmpeg (when installed) and the bundled one.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PcmChunk } from '../../src/engines/types.js';
import { waitFor, quietFor } from '../helpers/wait.js';
import {
  AudioDecodeError,
  FfmpegEncoder,
  Int16Resampler,
  SPEECH_FORMATS,
  bundledFfmpegPath,
  contentTypeFor,
  decodeAudio,
  encodeSpeech,
  encodeWav,
  ffmpegBinary,
  probeAudio,
  resampleFloat,
  setFfmpegBinary,
  closeSpareEncoders,
  spareEncoderCount,
  wavHeader,
  type SpeechFormat,
} from '../../src/codec/index.js';
import { createFliteEngine, type EmbeddedSpeechEngine } from '../../src/engines/flite/index.js';

function tone(freq: number, seconds: number, rate: number, amp = 8000): Int16Array {
  const out = new Int16Array(Math.round(seconds * rate));
  for (let i = 0; i < out.length; i++) out[i] = Math.round(amp * Math.sin((2 * Math.PI * freq * i) / rate));
  return out;
}

function concat16(parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

function rmsOf(x: ArrayLike<number>, from = 0, to = x.length): number {
  let s = 0;
  for (let i = from; i < to; i++) s += x[i] * x[i];
  return Math.sqrt(s / Math.max(1, to - from));
}

async function* fromChunks(chunks: PcmChunk[], delayMs = 0): AsyncGenerator<PcmChunk> {
  for (const c of chunks) {
    if (delayMs) await sleep(delayMs);
    yield c;
  }
}

async function collectBytes(it: AsyncIterable<Buffer>): Promise<{ bytes: Buffer; times: number[]; parts: number }> {
  const t0 = performance.now();
  const parts: Buffer[] = [];
  const times: number[] = [];
  for await (const b of it) {
    parts.push(b);
    times.push(performance.now() - t0);
  }
  return { bytes: Buffer.concat(parts), times, parts: parts.length };
}

function count(haystack: Buffer, needle: string): number {
  let n = 0;
  for (let i = haystack.indexOf(needle); i >= 0; i = haystack.indexOf(needle, i + 1)) n++;
  return n;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const EXPECTED: Record<SpeechFormat, { container: string; codec: string; rate: number }> = {
  mp3: { container: 'mp3', codec: 'mp3', rate: 24000 },
  opus: { container: 'ogg', codec: 'opus', rate: 48000 },
  aac: { container: 'aac', codec: 'aac', rate: 24000 },
  flac: { container: 'flac', codec: 'flac', rate: 24000 },
  wav: { container: 'wav', codec: 'pcm_s16le', rate: 24000 },
  pcm: { container: '', codec: '', rate: 24000 },
};

let engine: EmbeddedSpeechEngine;
/** real speech, as an engine produced it (16 kHz, several chunks) */
let speech: PcmChunk[];
let speechSeconds: number;

before(async () => {
  engine = createFliteEngine({ poolSize: 1 });
  speech = [];
  for await (const c of engine.synthesize({
    text: 'The audio codec test speaks a few sentences. Each one is a chunk. Durations must agree across formats.',
    voice: 'slt',
    speed: 1,
  }))
    speech.push(c);
  speechSeconds = speech.reduce((n, c) => n + c.samples.length, 0) / 16000;
});

after(async () => {
  setFfmpegBinary(undefined);
  await engine?.close();
});

describe('resampler', () => {
  test('streaming in uneven chunks gives the same samples as one pass, with the exact length', () => {
    const input = tone(440, 1.3, 16000);
    const whole = new Int16Resampler(16000, 24000);
    const a = concat16([whole.push(input), whole.flush()]);
    const chunked = new Int16Resampler(16000, 24000);
    const parts: Int16Array[] = [];
    let pos = 0;
    for (const size of [1, 7, 160, 3000, 5, 999]) {
      parts.push(chunked.push(input.subarray(pos, pos + size)));
      pos += size;
    }
    parts.push(chunked.push(input.subarray(pos)));
    parts.push(chunked.flush());
    const b = concat16(parts);
    assert.equal(a.length, Math.round((input.length * 24000) / 16000));
    assert.equal(b.length, a.length);
    let maxDiff = 0;
    for (let i = 0; i < a.length; i++) maxDiff = Math.max(maxDiff, Math.abs(a[i] - b[i]));
    assert.ok(maxDiff <= 1, `max difference ${maxDiff}`);
  });

  test('keeps the frequency and level of a tone; no delay', () => {
    const input = tone(440, 1, 22050);
    const r = new Int16Resampler(22050, 24000);
    const out = concat16([r.push(input), r.flush()]);
    const expected = tone(440, 1, 24000);
    // compare away from the edges: same phase means no delay
    let err = 0;
    for (let i = 1000; i < out.length - 1000; i++) err = Math.max(err, Math.abs(out[i] - expected[i]));
    assert.ok(err < 200, `max error against an ideal 24 kHz tone: ${err}`);
  });

  test('removes content above the new Nyquist frequency when reducing the rate', () => {
    const x = new Float32Array(48000);
    for (let i = 0; i < x.length; i++) x[i] = 0.5 * Math.sin((2 * Math.PI * 11000 * i) / 48000);
    const y = resampleFloat(x, 48000, 16000);
    assert.equal(y.length, 16000);
    assert.ok(rmsOf(y, 200, 15800) < 0.01, `11 kHz tone leaked at 16 kHz: rms ${rmsOf(y, 200, 15800)}`);
    const z = resampleFloat(
      x.map((_, i) => 0.5 * Math.sin((2 * Math.PI * 1000 * i) / 48000)),
      48000,
      16000,
    );
    assert.ok(Math.abs(rmsOf(z, 200, 15800) - 0.5 / Math.SQRT2) < 0.01, 'a 1 kHz tone passes');
  });
});

describe('formats', () => {
  test('content types', () => {
    assert.deepEqual(Object.fromEntries(SPEECH_FORMATS.map((f) => [f, contentTypeFor(f)])), {
      mp3: 'audio/mpeg',
      opus: 'audio/ogg',
      aac: 'audio/aac',
      flac: 'audio/flac',
      wav: 'audio/wav',
      pcm: 'audio/pcm',
    });
  });

  test('pcm is raw 24 kHz 16-bit mono with the right length', async () => {
    const { bytes } = await collectBytes(encodeSpeech(fromChunks(speech), 'pcm'));
    assert.equal(bytes.length % 2, 0);
    assert.ok(Math.abs(bytes.length / 2 / 24000 - speechSeconds) < 0.01);
    assert.notEqual(bytes.subarray(0, 4).toString('latin1'), 'RIFF');
  });

  test('streamed WAV has exactly one header, with unknown (0xFFFFFFFF) length, and decodes', async () => {
    const { bytes, parts } = await collectBytes(encodeSpeech(fromChunks(speech), 'wav'));
    assert.ok(parts > 2, 'header and several pieces of audio');
    assert.equal(count(bytes, 'RIFF'), 1);
    assert.equal(count(bytes, 'WAVEfmt '), 1);
    assert.equal(bytes.readUInt32LE(4), 0xffffffff);
    assert.equal(bytes.readUInt32LE(40), 0xffffffff);
    assert.equal(bytes.readUInt32LE(24), 24000);
    assert.equal((bytes.length - 44) % 2, 0);
    const p = await probeAudio(bytes);
    assert.equal(p.codec, 'pcm_s16le');
    assert.equal(p.sampleRate, 24000);
    assert.ok(Math.abs(p.duration - speechSeconds) < 0.05, `${p.duration} vs ${speechSeconds}`);
    // and the in-process decoder reads it as well
    const d = await decodeAudio(bytes);
    assert.ok(Math.abs(d.duration - speechSeconds) < 0.05);
  });

  const binaries: { name: string; path: () => string | undefined }[] = [
    { name: 'automatic (system when installed)', path: () => undefined },
    { name: 'bundled @ffmpeg-installer', path: () => bundledFfmpegPath() },
  ];
  for (const bin of binaries) {
    describe(`ffmpeg: ${bin.name}`, () => {
      before(() => {
        const p = bin.path();
        setFfmpegBinary(p);
        if (bin.name.startsWith('bundled')) assert.ok(p, 'the bundled ffmpeg is executable');
      });
      after(() => setFfmpegBinary(undefined));

      test('every format decodes at the expected sample rate and durations agree within 0.5 s', async () => {
        const durations: Record<string, number> = {};
        for (const format of ['mp3', 'opus', 'aac', 'flac'] as const) {
          const { bytes } = await collectBytes(encodeSpeech(fromChunks(speech), format));
          const p = await probeAudio(bytes);
          assert.equal(p.container, EXPECTED[format].container, `${format} container`);
          assert.equal(p.codec, EXPECTED[format].codec, `${format} codec`);
          assert.equal(p.sampleRate, EXPECTED[format].rate, `${format} sample rate`);
          assert.equal(p.channels, 1);
          durations[format] = p.duration;
          // one container per response
          if (format === 'mp3') {
            assert.equal(count(bytes, 'Xing') + count(bytes, 'Info'), 0, 'no VBR header (cannot be finalized on a pipe)');
            assert.equal(count(bytes, 'ID3'), 0);
          }
          if (format === 'opus') {
            assert.equal(count(bytes, 'OpusHead'), 1);
            assert.equal(bytes.subarray(0, 4).toString('latin1'), 'OggS');
          }
          if (format === 'flac') assert.equal(count(bytes, 'fLaC'), 1);
          if (format === 'aac') assert.equal(bytes[0], 0xff, 'ADTS sync');
        }
        for (const [f, d] of Object.entries(durations)) {
          assert.ok(Math.abs(d - speechSeconds) < 0.5, `${f}: ${d.toFixed(3)} s vs ${speechSeconds.toFixed(3)} s`);
        }
      });
    });
  }

  test('the encoder streams: bytes come out before the input has ended', async () => {
    // 6 pieces of 0.5 s; the last is held back until the first encoded bytes have come out (or 30 s went by): an
    // encoder that streams gives bytes while its input is still open, one that waits for the end never does. A
    // condition, not a clock: a loaded machine only makes the wait longer.
    const pieces = Array.from({ length: 6 }, (_, i): PcmChunk => ({ samples: tone(300 + 50 * i, 0.5, 16000), sampleRate: 16000 }));
    for (const format of ['mp3', 'opus'] as const) {
      let sawBytes!: () => void;
      const firstBytes = new Promise<void>((resolve) => (sawBytes = resolve));
      let bytesBeforeEnd = false;
      const input = async function* () {
        for (const c of pieces.slice(0, -1)) yield c;
        let timer: NodeJS.Timeout | undefined;
        bytesBeforeEnd = await Promise.race([firstBytes.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), 30_000)))]);
        clearTimeout(timer);
        yield pieces[pieces.length - 1]!;
      };
      const parts: Buffer[] = [];
      for await (const b of encodeSpeech(input(), format)) {
        parts.push(b);
        sawBytes();
      }
      assert.ok(bytesBeforeEnd, `${format}: no bytes came out while the input was open`);
      assert.ok(parts.length >= 2, `${format}: ${parts.length} pieces`);
      const p = await probeAudio(Buffer.concat(parts));
      assert.ok(Math.abs(p.duration - 3) < 0.3, `${format}: ${p.duration}`);
    }
  });

  test('after a format is used, a spare ffmpeg waits for the next response and is used by it', async () => {
    closeSpareEncoders();
    const pieces: PcmChunk[] = [{ samples: tone(300, 1, 16000), sampleRate: 16000 }];
    const a = await collectBytes(encodeSpeech(fromChunks(pieces), 'aac'));
    await waitFor(() => spareEncoderCount() > 0, { what: 'a spare ffmpeg' });
    assert.equal(spareEncoderCount(), 1);
    const b = await collectBytes(encodeSpeech(fromChunks(pieces), 'aac'));
    assert.equal(b.bytes.length > 0, true);
    assert.ok(Math.abs((await probeAudio(b.bytes)).duration - (await probeAudio(a.bytes)).duration) < 0.05);
    closeSpareEncoders();
    assert.equal(spareEncoderCount(), 0);
  });

  test('a chunk stream whose rate changes is resampled piecewise into one continuous output', async () => {
    const chunks: PcmChunk[] = [
      { samples: tone(440, 1, 16000), sampleRate: 16000 },
      { samples: tone(440, 1, 22050), sampleRate: 22050 },
    ];
    const { bytes } = await collectBytes(encodeSpeech(fromChunks(chunks), 'pcm'));
    assert.equal(bytes.length / 2, 48000);
  });

  test('abort kills ffmpeg and stops pulling PCM', async () => {
    const ac = new AbortController();
    let pulled = 0;
    let sourceClosed = false;
    async function* endless(): AsyncGenerator<PcmChunk> {
      try {
        for (;;) {
          pulled++;
          await sleep(20);
          yield { samples: tone(200, 0.25, 16000), sampleRate: 16000 };
        }
      } finally {
        sourceClosed = true;
      }
    }
    let got = 0;
    await assert.rejects(
      async () => {
        for await (const _ of encodeSpeech(endless(), 'mp3', ac.signal)) {
          if (++got === 3) ac.abort();
        }
      },
      { name: 'AbortError' },
    );
    await waitFor(() => sourceClosed, { what: 'the PCM source to be closed' });
    const pulledAtStop = pulled;
    // a short pause proving a negative: nothing pulls PCM any more
    await quietFor(100);
    assert.equal(pulled, pulledAtStop, 'no more PCM is pulled after the abort');
  });

  test('FfmpegEncoder: killing on abort ends the process', async () => {
    const ac = new AbortController();
    const enc = new FfmpegEncoder('opus', { sampleRate: 24000, signal: ac.signal });
    const pid = enc.pid!;
    assert.ok(alive(pid));
    await enc.write(Buffer.from(tone(300, 1, 24000).buffer));
    ac.abort();
    const out: Buffer[] = [];
    for await (const b of enc) out.push(b);
    await waitFor(() => !alive(pid), { what: 'ffmpeg to be gone' });
  });

  test('an ffmpeg failure surfaces as an error', async () => {
    setFfmpegBinary(bundledFfmpegPath());
    try {
      // an encoder that cannot start: invalid sample rate for the input
      const enc = new FfmpegEncoder('mp3', { sampleRate: -5 });
      enc.end();
      await assert.rejects(
        async () => {
          for await (const _ of enc) {
            /* drain */
          }
        },
        { name: 'FfmpegError' },
      );
    } finally {
      setFfmpegBinary(undefined);
    }
  });
});

describe('decoding uploads', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'portico-codec-test-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('16-bit WAV (stereo, 22.05 kHz) decodes in-process to 16 kHz mono', async () => {
    const left = tone(500, 2, 22050);
    const stereo = new Int16Array(left.length * 2);
    for (let i = 0; i < left.length; i++) {
      stereo[2 * i] = left[i];
      stereo[2 * i + 1] = left[i];
    }
    const h = wavHeader(22050, 2, stereo.byteLength);
    const d = await decodeAudio(Buffer.concat([h, Buffer.from(stereo.buffer)]));
    assert.equal(d.sampleRate, 16000);
    assert.equal(d.pcm.length, 32000);
    assert.ok(Math.abs(d.duration - 2) < 1e-9);
    assert.ok(Math.abs(rmsOf(d.pcm, 100, 31900) - 8000 / 32768 / Math.SQRT2) < 0.01);
  });

  test('mp3, ogg/opus, aac, flac and m4a (index at the end) decode through ffmpeg', async () => {
    const wavPath = join(dir, 'in.wav');
    writeFileSync(wavPath, encodeWav(tone(400, 1.5, 16000), 16000));
    const bin = ffmpegBinary().path;
    for (const [ext, args] of [
      ['mp3', ['-c:a', 'libmp3lame']],
      ['ogg', ['-c:a', 'libopus']],
      ['aac', ['-c:a', 'aac', '-f', 'adts']],
      ['flac', ['-c:a', 'flac']],
      ['m4a', ['-c:a', 'aac', '-f', 'ipod']],
    ] as const) {
      const out = join(dir, `out.${ext}`);
      execFileSync(bin, ['-hide_banner', '-loglevel', 'error', '-y', '-i', wavPath, ...args, out]);
      const d = await decodeAudio(readFileSync(out));
      assert.equal(d.sampleRate, 16000);
      assert.ok(Math.abs(d.duration - 1.5) < 0.15, `${ext}: ${d.duration}`);
      assert.ok(rmsOf(d.pcm, 4000, 20000) > 0.1, `${ext}: audible`);
    }
  });

  test('undecodable input is an AudioDecodeError (400)', async () => {
    const cases: [string, Buffer][] = [
      ['empty', Buffer.alloc(0)],
      ['text', Buffer.from('this is not audio at all, just some words in a text file\n'.repeat(20))],
      ['random bytes', Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 251))],
      ['truncated wav', wavHeader(16000, 1, 1000).subarray(0, 30)],
      ['wav without samples', wavHeader(16000, 1, 0)],
      ['json', Buffer.from('{"model":"whisper-1"}')],
    ];
    for (const [name, bytes] of cases) {
      await assert.rejects(decodeAudio(bytes), (e: unknown) => {
        assert.ok(e instanceof AudioDecodeError, `${name}: ${String(e)}`);
        assert.equal(e.status, 400);
        assert.equal(e.code, 'invalid_audio');
        return true;
      });
    }
  });
});
