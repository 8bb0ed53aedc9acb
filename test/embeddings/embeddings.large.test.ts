/**
 * A large embeddings answer (issue 23 §2: 2048 vectors of 1536 floats are ~64 MB of JSON, which held the event
 * loop 1.4-1.6 s of CPU): read in blocks, decoded and parsed in a worker thread, its vectors kept packed, and
 * Portico's answer written in a worker thread too (src/embeddings/answer-bytes.ts). What a client gets is byte for
 * byte what the inline path makes (JSON.stringify of the same answer), and the same refusals; no JSON.parse of the
 * answer on the event loop, which turns while it is done, and none of the answer's text made there. A small
 * answer keeps the inline path.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { countTurns } from '../helpers/turns.js';
import { longestStringify } from '../helpers/stringify-spy.js';
import { createOpenAICompatibleEmbeddingsEngine, parseAnswer, parseLargeAnswer } from '../../src/engines/shared/embeddings.js';
import { BodyBlocks, OFF_THREAD_BYTES } from '../../src/platform/http/json-body.js';
import { toBase64 } from '../../src/embeddings/service.js';
import { answerBytes } from '../../src/embeddings/answer-bytes.js';
import { reclaimState } from '../../src/platform/reclaim.js';
import { waitFor } from '../helpers/wait.js';
import type { EmbedRequest, EmbedResult } from '../../src/engines/types.js';
import type { ModelSpec } from '../../src/models/config.js';

const COUNT = 2048;
const DIMS = 256;
const inputs = Array.from({ length: COUNT }, (_, i) => `text number ${i}`);

/** a vector per input; numbers JSON writes in each of its forms (exponents, -0, integers, float32 values) */
function vector(i: number, dims = DIMS): number[] {
  return Array.from({ length: dims }, (_, k) => (k === 0 ? -0 : k === 1 ? 1e-7 * (i + 1) : k === 2 ? 1e21 : k === 3 ? i : Math.fround(Math.sin(i * 31 + k) / 3)));
}

/** the upstream's answer text: JSON of its own writing (spaces, `1.0`), as servers send it */
function answerText(n: number, opts: { usage?: boolean; corrupt?: 'string-in-vector' | 'short' } = {}): string {
  const parts: string[] = [];
  for (let i = 0; i < n; i++) {
    if (opts.corrupt === 'short' && i === n - 1) break;
    const v = vector(i).map((x, k) => (opts.corrupt === 'string-in-vector' && i === 7 && k === 5 ? '"x"' : k === 0 ? '-0' : k === 3 ? `${x}.0` : String(x)));
    parts.push(`{ "object": "embedding", "index": ${i}, "embedding": [${v.join(', ')}] }`);
  }
  const usage = opts.usage === false ? '' : `, "usage": { "prompt_tokens": ${n * 3}, "total_tokens": ${n * 3} }`;
  return `{ "object": "list", "data": [${parts.join(',\n')}], "model": "up-embedder"${usage} }`;
}

/**
 * an upstream whose /v1/embeddings answers `text` (made before any measure); `held`: each request waits (counted in
 * `waiting`) until the test calls `open()`, which lets the ones waiting then go
 */
async function upstream(text: () => string, o: { held?: boolean } = {}): Promise<{ url: string; close(): Promise<void>; open(): void; waiting: number }> {
  let open = () => {};
  let gate = new Promise<void>((r) => (open = r));
  const self = {
    url: '',
    waiting: 0,
    open() {
      open();
      gate = new Promise<void>((r) => (open = r));
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      if (o.held) {
        self.waiting++;
        await gate;
        self.waiting--;
      }
      const body = Buffer.from(text());
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  self.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return self;
}

/** runs f with JSON.parse watched: the length of the longest text parsed on this thread */
async function longestParse<T>(f: () => Promise<T>): Promise<{ result: T; longest: number }> {
  const original = JSON.parse;
  let longest = 0;
  JSON.parse = function (this: unknown, text: string, reviver?: Parameters<typeof JSON.parse>[1]) {
    longest = Math.max(longest, String(text).length);
    return original.call(this, text, reviver);
  } as typeof JSON.parse;
  try {
    return { result: await f(), longest };
  } finally {
    JSON.parse = original;
  }
}

/** the vectors as arrays, whichever way the engine gave them */
function arrays(r: EmbedResult): number[][] {
  const v = r.vectors;
  if (Array.isArray(v)) return v;
  return Array.from({ length: v.count }, (_, i) => Array.from(v.flat.subarray(i * v.dims, (i + 1) * v.dims)));
}

/** a result with its vectors as arrays, to compare with the inline parse */
const unpacked = (r: EmbedResult): EmbedResult => ({ ...r, vectors: arrays(r) });

const blocksOf = (text: string) => {
  const b = new BodyBlocks();
  b.add(Buffer.from(text));
  return b;
};

describe('a large embeddings answer, decoded off the event loop', () => {
  const req: EmbedRequest = { model: 'm', input: inputs };

  test('the engine: the same vectors, usage and model as the inline parse; nothing of the answer parsed on this thread, which turns', async () => {
    const text = answerText(COUNT);
    assert.ok(text.length > 4 * OFF_THREAD_BYTES);
    const up = await upstream(() => text);
    const engine = createOpenAICompatibleEmbeddingsEngine({ baseUrl: up.url });
    try {
      const turns = countTurns();
      const { result, longest } = await longestParse(() => engine.embed({ ...req, input: [...inputs] }));
      const turned = turns.stop();
      const inline = parseAnswer(text, req);
      assert.ok(!Array.isArray(result.vectors), 'packed: no array of its numbers on this thread');
      assert.deepEqual(unpacked(result), inline);
      assert.ok(Object.is(arrays(result)[0]![0], -0), 'a -0 stays -0');
      assert.ok(longest < OFF_THREAD_BYTES, `the main thread parsed a text of ${longest} characters`);
      // the reads of the answer, and the wait for the worker
      assert.ok(turned >= 6, `the loop turned ${turned} times`);
    } finally {
      await engine.close();
      await up.close();
    }
  });

  test('the same refusals as the inline parse, and the same estimate when the upstream gives no usage', async () => {
    for (const corrupt of ['string-in-vector', 'short'] as const) {
      const text = answerText(COUNT, { corrupt });
      assert.throws(() => parseAnswer(text, req));
      let inlineMessage = '';
      try {
        parseAnswer(text, req);
      } catch (e) {
        inlineMessage = (e as Error).message;
      }
      await assert.rejects(parseLargeAnswer(blocksOf(text), req), (e: Error) => e.message === inlineMessage);
    }
    await assert.rejects(parseLargeAnswer(blocksOf('{"data": [' + '1,'.repeat(OFF_THREAD_BYTES) + '1'), req), /not JSON/);
    const text = answerText(COUNT, { usage: false });
    const large = await parseLargeAnswer(blocksOf(text), req);
    assert.deepEqual(unpacked(large), parseAnswer(text, req));
    assert.ok(large.inputTokens > 0);
  });

  test('a small answer is parsed on this thread, at once', async () => {
    const small: EmbedRequest = { model: 'm', input: inputs.slice(0, 2) };
    const text = answerText(2);
    const up = await upstream(() => text);
    const engine = createOpenAICompatibleEmbeddingsEngine({ baseUrl: up.url });
    try {
      const { result, longest } = await longestParse(() => engine.embed(small));
      assert.deepEqual(result, parseAnswer(text, small));
      assert.equal(longest, text.length, 'parsed here');
    } finally {
      await engine.close();
      await up.close();
    }
  });
});

describe('POST /v1/embeddings with a large answer', () => {
  let t: TestApp & { url?: string };
  let up: { url: string; close(): Promise<void> };
  let held: Awaited<ReturnType<typeof upstream>>;
  let key: string;
  const text = answerText(COUNT);
  before(async () => {
    up = await upstream(() => text);
    const models = [{ name: 'emb', provider: 'openai-compatible', base_url: up.url, type: 'embeddings', retries: 0 } as ModelSpec];
    // an upstream that answers once the test lets it (held.open)
    held = await upstream(() => text, { held: true });
    models.push({ name: 'emb-held', provider: 'openai-compatible', base_url: held.url, type: 'embeddings', retries: 0 } as ModelSpec);
    t = await buildTestApp({ db: 'pglite', listen: true, models });
    key = await t.inferenceKey('alice');
  });
  after(async () => {
    await t?.close();
    await up?.close();
    await held?.close();
  });

  const post = (body: object, signal?: AbortSignal) =>
    fetch(`${t.url}/v1/embeddings`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body), signal });

  for (const format of ['float', 'base64'] as const) {
    test(`${format}: the bytes JSON.stringify makes of the answer, none of its text made on this thread`, async () => {
      const {
        result: raw,
        longest,
        total,
      } = await longestStringify(async () => {
        const res = await post({ model: 'emb', input: inputs, encoding_format: format });
        assert.equal(res.status, 200);
        return res.text();
      });
      const vectors = arrays(parseAnswer(text, { model: 'm', input: inputs }));
      const expected = JSON.stringify({
        object: 'list',
        data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: format === 'base64' ? toBase64(v) : v })),
        model: 'emb',
        usage: { prompt_tokens: COUNT * 3, total_tokens: COUNT * 3 },
      });
      assert.equal(raw, expected);
      assert.ok(raw.length > 8 * 256 * 1024);
      // the client's request (2048 short texts) and the upstream's are under it; the answer is ~40x it
      assert.ok(longest < 256 * 1024, `one JSON.stringify call made ${longest} characters`);
      // the answer's text is made in a worker thread: what this thread makes is the client's and the upstream's
      // requests (2048 short texts) and the rest of the answer; in slices here it was the whole answer again
      assert.ok(total < raw.length / 4, `this thread's JSON.stringify made ${total} characters, the answer is ${raw.length}`);
    });
  }
  test("a request in hand puts off the event loop's collection of large work until its answer is sent, or its client has left", async () => {
    // ~0.5 MiB of texts: a body read in blocks and parsed off the event loop (past OFF_THREAD_BYTES)
    const big = Array.from({ length: COUNT }, (_, i) => `text number ${i} `.padEnd(256, 'x'));
    assert.ok(JSON.stringify(big).length > OFF_THREAD_BYTES);
    const before = reclaimState().underWay;
    const answered = post({ model: 'emb-held', input: big });
    await waitFor(() => held.waiting === 1, { what: 'the request at the upstream' });
    assert.equal(reclaimState().underWay, before + 1, 'under way while the upstream answers');
    held.open();
    const res = await answered;
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    await waitFor(() => reclaimState().underWay === before, { what: 'the work to end once answered' });

    // a client that leaves before the answer ends it too
    const ac = new AbortController();
    const left = post({ model: 'emb-held', input: big }, ac.signal).catch((e: Error) => e);
    await waitFor(() => held.waiting === 1, { what: 'the second request at the upstream' });
    assert.equal(reclaimState().underWay, before + 1);
    ac.abort();
    assert.ok((await left) instanceof Error);
    await waitFor(() => reclaimState().underWay === before, { what: 'the work to end once the client left' });
    held.open();
    await waitFor(() => held.waiting === 0, { what: 'the upstream to let the left request go' });

    // a small body (the 2048 short texts, ~40 KB) is a request in hand too
    const small = post({ model: 'emb-held', input: inputs });
    await waitFor(() => held.waiting === 1, { what: 'the small request at the upstream' });
    assert.equal(reclaimState().underWay, before + 1);
    held.open();
    const smallRes = await small;
    assert.equal(smallRes.status, 200);
    await smallRes.arrayBuffer();
    await waitFor(() => reclaimState().underWay === before, { what: 'the small request to end' });
  });
});

describe('the bytes of a large answer, made in the worker thread', () => {
  // the numbers JSON writes in each of its forms, and those it cannot (null): what a float32 of an upstream's
  // base64 may hold
  const odd = [-0, 0, 1, -1.5, 1e-7, 1e21, 1.7976931348623157e308, 5e-324, Math.fround(0.1), NaN, Infinity, -Infinity, 123456789];
  const dims = odd.length;
  const vectors = Array.from({ length: 3 }, (_, i) => odd.map((x) => (typeof x === 'number' && Number.isFinite(x) ? x * (i + 1) : x)));

  for (const format of ['float', 'base64'] as const) {
    test(`${format}: the same bytes as JSON.stringify of the answer with its vectors in arrays, a model name of any characters`, async () => {
      const model = 'm\u00e9"\\ \u{1F600} \u2028"data":[]';
      const usage = { prompt_tokens: 7, total_tokens: 7 };
      const flat = new Float64Array(vectors.flat());
      const shell = { object: 'list', data: [], model, usage };
      const bytes = await answerBytes(shell, { flat, count: vectors.length, dims }, format === 'base64');
      const expected = JSON.stringify({
        object: 'list',
        data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: format === 'base64' ? toBase64(v) : v })),
        model,
        usage,
      });
      assert.ok(Buffer.isBuffer(bytes));
      assert.equal(bytes.toString('utf8'), expected);
      assert.equal(bytes.length, Buffer.byteLength(expected));
      assert.equal(flat.length, 0, 'the vectors moved to the worker thread');
    });
  }
});
