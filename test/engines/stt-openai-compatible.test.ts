/**
 * The OpenAI-compatible audio forwarders against the scripted upstream: multipart fields sent, verbose_json
 * mapped, errors mapped (pass-through 4xx vs 502), timeouts and aborts, and streamed PCM across odd chunk
 * boundaries.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  createOpenAICompatibleSpeechEngine,
  createOpenAICompatibleTranscriptionEngine,
  Pcm16Assembler,
  verboseJsonToTranscript,
} from '../../src/engines/openai-compatible/audio.js';
import { languageCode, languageName } from '../../src/engines/shared/languages.js';
import { EngineError, type PcmChunk, type TranscribeRequest } from '../../src/engines/types.js';
import { DEFAULT_VERBOSE_JSON, int16ToLeBytes, startScriptedAudioUpstream, tone } from '../helpers/scripted-audio-upstream.js';
import { stallWatch } from '../helpers/wait.js';

const FILE = Buffer.from('RIFF\x24\x00\x00\x00WAVEfmt fake wav bytes \x00\x01\x02\xff', 'latin1');

function req(extra: Partial<TranscribeRequest> = {}): TranscribeRequest {
  return {
    model: 'whisper-1',
    file: { bytes: FILE, filename: 'speech.wav', mimeType: 'audio/wav' },
    task: 'transcribe',
    wordTimestamps: false,
    ...extra,
  };
}

function isEngineError(code: string, status: number, message?: RegExp) {
  return (e: unknown) => {
    assert.ok(e instanceof EngineError, `EngineError expected, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.status, status, e.message);
    if (message) assert.match(e.message, message);
    return true;
  };
}

async function collect(it: AsyncIterable<PcmChunk>): Promise<PcmChunk[]> {
  const out: PcmChunk[] = [];
  for await (const c of it) out.push(c);
  return out;
}

function joinSamples(chunks: PcmChunk[]): Int16Array {
  const n = chunks.reduce((a, c) => a + c.samples.length, 0);
  const out = new Int16Array(n);
  let o = 0;
  for (const c of chunks) {
    out.set(c.samples, o);
    o += c.samples.length;
  }
  return out;
}

// ---------------------------------------------------------------- transcription

test('transcription: sends the file and fields as multipart, maps verbose_json with words', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    const engine = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl + '/', apiKey: 'sk-up', upstreamModel: 'Systran/faster-whisper-small' });
    assert.equal(engine.needsPcm, false);
    assert.equal(engine.canTranslate, true);
    const tr = await engine.transcribe(req({ wordTimestamps: true, language: 'en', prompt: 'Star Wars', temperature: 0.2 }));

    assert.equal(up.requests.length, 1);
    const r = up.requests[0];
    assert.equal(r.method, 'POST');
    assert.equal(r.path, '/v1/audio/transcriptions');
    assert.equal(r.headers.authorization, 'Bearer sk-up');
    assert.match(String(r.headers['content-type']), /^multipart\/form-data; boundary=/);
    assert.equal(r.files.length, 1);
    assert.equal(r.files[0].field, 'file');
    assert.equal(r.files[0].filename, 'speech.wav');
    assert.equal(r.files[0].contentType, 'audio/wav');
    assert.deepEqual(r.files[0].bytes, FILE, 'the original bytes, unchanged');
    assert.deepEqual(r.fields, {
      model: ['Systran/faster-whisper-small'],
      response_format: ['verbose_json'],
      prompt: ['Star Wars'],
      temperature: ['0.2'],
      language: ['en'],
      'timestamp_granularities[]': ['word', 'segment'],
    });

    assert.equal(tr.text, 'Hello there, general Kenobi.');
    assert.equal(tr.language, 'en', '"english" -> "en"');
    assert.equal(tr.duration, 2.5);
    assert.deepEqual(tr.segments, [
      {
        start: 0,
        end: 2.5,
        text: 'Hello there, general Kenobi.',
        tokens: DEFAULT_VERBOSE_JSON.segments[0].tokens,
        avgLogprob: -0.25,
        noSpeechProb: 0.01,
        compressionRatio: 0.9,
        temperature: 0,
      },
    ]);
    assert.deepEqual(tr.words, DEFAULT_VERBOSE_JSON.words);
  } finally {
    await up.close();
  }
});

test('transcription: without word timestamps no granularities are sent and no words returned; request model is the default', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    const engine = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl });
    const tr = await engine.transcribe(req());
    const r = up.requests[0];
    assert.equal(r.headers.authorization, undefined);
    assert.deepEqual(r.fields, { model: ['whisper-1'], response_format: ['verbose_json'] });
    assert.equal(tr.words, undefined);
    assert.equal(tr.segments.length, 1);

    // a server that ignores response_format: plain json, then text/plain
    up.script({ type: 'json', body: { text: ' just text ' } }, { type: 'text', body: 'plain words\n' });
    const a = await engine.transcribe(req({ language: 'fr' }));
    assert.deepEqual(a, { text: 'just text', language: 'fr', segments: [] });
    const b = await engine.transcribe(req());
    assert.deepEqual(b, { text: 'plain words', language: undefined, segments: [] });
  } finally {
    await up.close();
  }
});

test('translation: posts to /audio/translations without language or granularities; language en', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    up.script({
      type: 'json',
      body: { task: 'translate', language: 'german', duration: '3.25', text: 'Good morning.', segments: [{ start: 0, end: 3.25, text: ' Good morning.' }] },
    });
    const engine = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl });
    const tr = await engine.transcribe(req({ task: 'translate', language: 'de', wordTimestamps: true, prompt: 'p' }));
    const r = up.requests[0];
    assert.equal(r.path, '/v1/audio/translations');
    assert.deepEqual(r.fields, { model: ['whisper-1'], response_format: ['verbose_json'], prompt: ['p'] });
    assert.equal(tr.text, 'Good morning.');
    assert.equal(tr.duration, 3.25, 'a duration sent as a string is read as a number');
    assert.equal(tr.language, 'de', 'the upstream reports the source language');
    assert.deepEqual(tr.segments, [{ start: 0, end: 3.25, text: 'Good morning.' }]);
  } finally {
    await up.close();
  }
});

test('transcription errors: client problems pass through, upstream problems are 502, with the upstream message', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    const engine = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl });
    up.script(
      { type: 'error', status: 400, message: 'Audio file is too short. Minimum audio length is 0.1 seconds.', code: 'audio_too_short' },
      { type: 'error', status: 400, message: 'Invalid file format. Supported formats: [flac, mp3]', code: 'weird_code' },
      { type: 'raw', status: 422, body: JSON.stringify({ detail: [{ loc: ['body', 'file'], msg: 'field required' }] }), contentType: 'application/json' },
      { type: 'error', status: 413, message: 'Maximum content size limit exceeded' },
      { type: 'error', status: 429, message: 'Slow down', errorType: 'rate_limit_error' },
      { type: 'error', status: 401, message: 'Incorrect API key provided', errorType: 'authentication_error' },
      { type: 'raw', status: 404, body: JSON.stringify({ detail: 'Model Systran/x is not installed' }), contentType: 'application/json' },
      { type: 'raw', status: 500, body: '<html>Internal Server Error</html>' },
      { type: 'json', status: 200, body: { no: 'text' } },
    );
    await assert.rejects(engine.transcribe(req()), isEngineError('audio_too_short', 400, /^Audio file is too short/));
    await assert.rejects(engine.transcribe(req()), isEngineError('invalid_request', 400, /^Invalid file format/));
    await assert.rejects(engine.transcribe(req()), isEngineError('invalid_request', 400, /field required/));
    await assert.rejects(engine.transcribe(req()), isEngineError('payload_too_large', 413, /content size/));
    await assert.rejects(engine.transcribe(req()), isEngineError('rate_limit_exceeded', 429, /Slow down/));
    await assert.rejects(engine.transcribe(req()), isEngineError('upstream_auth_failed', 502, /credentials \(HTTP 401\); check the model's api_key_env$/));
    await assert.rejects(engine.transcribe(req()), isEngineError('upstream_error', 502, /answered 404: Model Systran\/x is not installed/));
    await assert.rejects(engine.transcribe(req()), isEngineError('upstream_error', 502, /answered 500: <html>Internal Server Error/));
    await assert.rejects(engine.transcribe(req()), isEngineError('upstream_error', 502, /without text/));
    up.script({ type: 'destroy' });
    await assert.rejects(engine.transcribe(req()), isEngineError('upstream_unavailable', 502, /unreachable/));
  } finally {
    await up.close();
  }
  // nothing listens on the port any more
  const gone = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl });
  await assert.rejects(gone.transcribe(req()), isEngineError('upstream_unavailable', 502, /unreachable \((ECONNREFUSED|EPIPE|ECONNRESET|UND_ERR_SOCKET)/));
});

test('transcription: timeout is 504, abort cancels the upstream request', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    up.setDefault({ type: 'hang' });
    const slow = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl, timeoutMs: 200 });
    const stalls = stallWatch();
    const t0 = Date.now();
    await assert.rejects(slow.transcribe(req()), isEngineError('upstream_timeout', 504, /within/));
    // the 200 ms timer fired: late by no more than 1.3 s plus what the event loop was stalled
    assert.ok(Date.now() - t0 < 1500 + stalls.stop(), `the timeout came after ${Date.now() - t0} ms`);

    const engine = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl });
    const ac = new AbortController();
    const p = engine.transcribe(req({ signal: ac.signal }));
    await up.waitForRequests(2);
    ac.abort();
    await assert.rejects(p, isEngineError('aborted', 499));
    await up.requests[1].done;
    assert.equal(up.requests[1].clientAborted, true, 'the upstream saw the connection close');
  } finally {
    await up.close();
  }
});

test('verbose_json mapping skips malformed entries; language names and codes', () => {
  const t = verboseJsonToTranscript({
    text: 'x',
    language: 'Chinese',
    segments: [{ start: 0, end: 1, text: ' a' }, { start: 'bad', end: 1, text: 'b' }, null],
    words: [{ word: ' a', start: 0, end: 0.5 }, { word: 'b' }],
  });
  assert.deepEqual(t, { text: 'x', language: 'zh', segments: [{ start: 0, end: 1, text: 'a' }], words: [{ word: 'a', start: 0, end: 0.5 }] });
  assert.equal(languageCode('english'), 'en');
  assert.equal(languageCode('en'), 'en');
  assert.equal(languageCode('en-US'), 'en');
  assert.equal(languageCode('haitian creole'), 'ht');
  assert.equal(languageCode('burmese'), 'my');
  assert.equal(languageCode('klingon'), undefined);
  assert.equal(languageName('de'), 'german');
  assert.equal(languageName('xx'), 'xx');
});

// ---------------------------------------------------------------- speech

test('speech: posts JSON for pcm and yields the exact samples across odd chunk boundaries', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    const samples = tone(0.25); // 6000 samples, 12000 bytes
    samples[0] = -32768;
    samples[1] = 32767;
    samples[2] = -1;
    samples[3] = 256;
    up.script({ type: 'pcm', samples, chunkSizes: [1, 3, 2, 5, 7, 1, 1, 999] });
    const engine = createOpenAICompatibleSpeechEngine({ baseUrl: up.baseUrl, apiKey: 'k', upstreamModel: 'kokoro' });
    assert.deepEqual(engine.voices, ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
    const chunks = await collect(engine.synthesize({ text: 'Hello world.', voice: 'nova', speed: 1.5 }));
    const r = up.requests[0];
    assert.equal(r.path, '/v1/audio/speech');
    assert.equal(r.headers.authorization, 'Bearer k');
    assert.deepEqual(r.json, { model: 'kokoro', input: 'Hello world.', voice: 'nova', response_format: 'pcm', speed: 1.5 });
    assert.ok(chunks.length > 1, `streamed in ${chunks.length} chunks`);
    for (const c of chunks) {
      assert.equal(c.sampleRate, 24000);
      assert.ok(c.samples instanceof Int16Array && c.samples.length > 0);
    }
    assert.deepEqual(joinSamples(chunks), samples);
  } finally {
    await up.close();
  }
});

test('speech: chunks arrive over time; abort and early stop end the upstream request', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    const engine = createOpenAICompatibleSpeechEngine({ baseUrl: up.baseUrl });
    // endless slow stream: abort after the first chunks
    up.script({ type: 'pcm', samples: tone(0.1), chunkSizes: [481], intervalMs: 20, endless: true });
    const ac = new AbortController();
    const got: number[] = [];
    await assert.rejects(
      (async () => {
        for await (const _c of engine.synthesize({ text: 'x', voice: 'alloy', speed: 1, signal: ac.signal })) {
          got.push(performance.now());
          if (got.length === 3) ac.abort();
        }
      })(),
      isEngineError('aborted', 499),
    );
    assert.equal(got.length, 3);
    // streamed as it came, not collected: the first chunk was in hand before the upstream sent its third piece
    // (the upstream's own send times, 20 ms apart by its timer: no bound on how fast this machine is)
    const sent = up.requests[0].writes;
    assert.ok(got[0] < (sent[2] ?? Infinity), `first chunk at ${got[0].toFixed(1)} ms, the upstream's pieces at ${sent.map((t) => t.toFixed(1)).join(', ')} ms`);
    await up.requests[0].done;
    assert.equal(up.requests[0].clientAborted, true, 'abort closed the upstream connection');

    // the consumer breaks out early
    up.script({ type: 'pcm', samples: tone(0.1), chunkSizes: [480], intervalMs: 10, endless: true });
    for await (const c of engine.synthesize({ text: 'x', voice: 'alloy', speed: 1 })) {
      assert.ok(c.samples.length > 0);
      break;
    }
    await up.requests[1].done;
    assert.equal(up.requests[1].clientAborted, true, 'an early stop closed the upstream connection');
  } finally {
    await up.close();
  }
});

test('speech: errors and idle timeout', async () => {
  const up = await startScriptedAudioUpstream();
  try {
    // 600 ms: time enough for the first bytes on a loaded machine; the stall below is five times longer
    const engine = createOpenAICompatibleSpeechEngine({ baseUrl: up.baseUrl, timeoutMs: 600 });
    up.script(
      { type: 'error', status: 400, message: "Voice 'bob' not found" },
      { type: 'error', status: 503, message: 'model loading' },
      { type: 'json', body: { error: { message: 'surprise' } } },
      { type: 'hang' },
    );
    await assert.rejects(collect(engine.synthesize({ text: 'x', voice: 'bob', speed: 1 })), isEngineError('invalid_request', 400, /Voice 'bob' not found/));
    await assert.rejects(collect(engine.synthesize({ text: 'x', voice: 'alloy', speed: 1 })), isEngineError('upstream_error', 502, /503: model loading/));
    await assert.rejects(collect(engine.synthesize({ text: 'x', voice: 'alloy', speed: 1 })), isEngineError('upstream_error', 502, /JSON instead of audio: surprise/));
    await assert.rejects(collect(engine.synthesize({ text: 'x', voice: 'alloy', speed: 1 })), isEngineError('upstream_timeout', 504));
    // a stream that stalls after the first bytes also times out
    const bytes = int16ToLeBytes(tone(0.1));
    up.script({ type: 'pcm', bytes, chunkSizes: [100, 100], intervalMs: 3000 });
    const chunks: PcmChunk[] = [];
    await assert.rejects(
      (async () => {
        for await (const c of engine.synthesize({ text: 'x', voice: 'alloy', speed: 1 })) chunks.push(c);
      })(),
      isEngineError('upstream_timeout', 504),
    );
    assert.equal(joinSamples(chunks).length, 50);
  } finally {
    await up.close();
  }
});

test('Pcm16Assembler: any split of the bytes gives the same samples', () => {
  const samples = new Int16Array(1001);
  for (let i = 0; i < samples.length; i++) samples[i] = ((i * 7919) % 65536) - 32768;
  const bytes = int16ToLeBytes(samples);
  let seed = 42;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let round = 0; round < 50; round++) {
    const asm = new Pcm16Assembler();
    const parts: Int16Array[] = [];
    let off = 0;
    while (off < bytes.length) {
      const n = Math.floor(rand() * 9); // includes empty and single-byte pieces
      const s = asm.push(bytes.subarray(off, off + n));
      if (s) parts.push(s);
      off += n;
    }
    assert.equal(asm.pending, false);
    const joined = new Int16Array(parts.reduce((a, p) => a + p.length, 0));
    let o = 0;
    for (const p of parts) {
      joined.set(p, o);
      o += p.length;
    }
    assert.deepEqual(joined, samples);
  }
});

test("no upstream error message carries Portico's upstream key to a client", async () => {
  const up = await startScriptedAudioUpstream();
  const secret = 'sk-upstream-SECRET-1234567890abcdef';
  try {
    const stt = createOpenAICompatibleTranscriptionEngine({ baseUrl: up.baseUrl, apiKey: secret });
    const tts = createOpenAICompatibleSpeechEngine({ baseUrl: up.baseUrl, apiKey: secret });
    // upstreams that echo the key they were given (whole, or its first and last characters, as OpenAI does)
    up.script(
      { type: 'error', status: 401, message: `Incorrect API key provided: Bearer ${secret}` },
      { type: 'error', status: 400, message: `bad request for key ${secret}` },
      { type: 'error', status: 400, message: `Incorrect API key provided: ${secret.slice(0, 12)}****${secret.slice(-8)}` },
      { type: 'error', status: 500, message: `internal: ${secret}` },
      { type: 'error', status: 403, message: `forbidden ${secret}` },
    );
    const messages: string[] = [];
    for (let i = 0; i < 4; i++) {
      await assert.rejects(stt.transcribe(req()), (e: any) => (messages.push(e.message), true));
    }
    await assert.rejects(
      (async () => {
        for await (const _ of tts.synthesize({ text: 'hi', voice: 'alloy', speed: 1 })) void _;
      })(),
      (e: any) => (messages.push(e.message), true),
    );
    assert.equal(messages.length, 5);
    for (const m of messages) {
      assert.ok(!m.includes(secret), m);
      assert.ok(!m.includes(secret.slice(0, 12)) && !m.includes(secret.slice(-8)), m);
    }
  } finally {
    await up.close();
  }
});
