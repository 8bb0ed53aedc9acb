// JSON request bodies (src/platform/json-body.ts): a large one is parsed in the worker thread and its large arrays
// come back in batches, a turn of the event loop each, to the same value, keys in the same order.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { syncBuiltinESMExports } from 'node:module';
import threads from 'node:worker_threads';
import { Session } from 'node:inspector/promises';
import { parseJsonBody, prevalidated } from '../../src/platform/http/json-body.js';
import { SPLIT_BYTES } from '../../src/platform/http/json-worker.js';
import { MODEL, setup, type Env } from '../responses/util.js';
import { countTurns } from '../helpers/turns.js';

const small = (t: string) => JSON.parse(t);

function body(items: number, chars: number, tag: string) {
  return {
    model: `m-${tag}`,
    input: Array.from({ length: items }, (_, i) => ({
      type: 'message',
      role: i % 2 ? 'assistant' : 'user',
      content: [{ type: 'input_text', text: `${tag}${i} ` + 'é'.repeat(chars) }],
    })),
    tools: [{ type: 'function', name: 'f' }],
    stream: false,
    metadata: { a: '1' },
  };
}

describe('JSON bodies parsed off the event loop', () => {
  test('a large body comes back as JSON.parse makes it (keys in order), its arrays in batches with turns of the event loop between them', async () => {
    const v = body(4096, 1000, 'a');
    const text = JSON.stringify(v);
    assert.ok(Buffer.byteLength(text) > 4 * SPLIT_BYTES);
    // the batches are read one per turn (receiveMessageOnPort); each read is followed by a turn of the event loop
    const original = threads.receiveMessageOnPort;
    const turnsBefore: number[] = [];
    const turns = countTurns();
    threads.receiveMessageOnPort = (port) => {
      turnsBefore.push(turns.count);
      return original(port);
    };
    syncBuiltinESMExports();
    let got: typeof v;
    try {
      got = (await parseJsonBody(Buffer.from(text), small)) as typeof v;
    } finally {
      turns.stop();
      threads.receiveMessageOnPort = original;
      syncBuiltinESMExports();
    }
    assert.deepEqual(got, v);
    assert.deepEqual(Object.keys(got), Object.keys(v));
    // ~8 M characters of items in batches of ~512 Ki: one read per batch, turns of the loop between reads (not timed)
    assert.ok(turnsBefore.length >= 8, `${turnsBefore.length} batches`);
    assert.ok(turnsBefore[turnsBefore.length - 1]! - turnsBefore[0]! >= 4, `the loop turned ${turnsBefore[turnsBefore.length - 1]! - turnsBefore[0]!} times between the reads`);
  });

  test('several large bodies at once each get their own value; a body under the split size and a refused one are as before', async () => {
    const values = ['b', 'c', 'd'].map((t, i) => body(800 + i * 100, 3000, t));
    const got = await Promise.all([
      ...values.map((v) => parseJsonBody(Buffer.from(JSON.stringify(v)), small)),
      parseJsonBody(Buffer.from(JSON.stringify(body(100, 3000, 'e'))), small),
      parseJsonBody(Buffer.from(JSON.stringify(body(800, 3000, 'f')).slice(0, -1)), small).catch((e: { code?: string }) => e.code),
    ]);
    values.forEach((v, i) => assert.deepEqual(got[i], v));
    assert.deepEqual(got[3], body(100, 3000, 'e'));
    assert.equal(got[4], 'invalid_json');
    // an array at the top is not split
    const arr = Array.from({ length: 3000 }, (_, i) => 'x'.repeat(1000) + i);
    assert.deepEqual(await parseJsonBody(Buffer.from(JSON.stringify(arr)), small), arr);
  });
});

describe("a large body validated in the worker against its route's schema", () => {
  const schema = {
    type: 'object',
    properties: {
      model: { type: 'string', maxLength: 10 },
      input: { type: 'array', items: { type: 'object', properties: { role: { enum: ['user', 'assistant'] } } } },
      n: { type: 'integer', default: 7 },
    },
    required: ['model'],
    additionalProperties: false,
  };
  const big = (role: string) =>
    Buffer.from(JSON.stringify({ model: 'm', input: Array.from({ length: 3000 }, (_, i) => ({ role: i === 2999 ? role : 'user', text: 'x'.repeat(200) })) }));

  test("valid: marked once, for that schema object alone, with the defaults the event loop's Ajv would set; invalid: not marked", async () => {
    const v = (await parseJsonBody(big('assistant'), small, schema)) as Record<string, unknown>;
    assert.equal(v.n, 7, 'the default set, as the validator sets it on the event loop');
    assert.equal(prevalidated(v, { ...schema }), false, 'another schema object');
    assert.equal(prevalidated(v, schema), true);
    assert.equal(prevalidated(v, schema), false, 'taken once');
    const bad = await parseJsonBody(big('robot'), small, schema);
    assert.equal(prevalidated(bad, schema), false);
    const unchecked = await parseJsonBody(big('assistant'), small);
    assert.equal(prevalidated(unchecked, schema), false, 'no schema sent, none checked');
    // a schema Ajv cannot compile is left to the event loop (the route's first call says why)
    const broken = { type: 'object', properties: { a: { $ref: '#/nowhere' } } };
    const b = await parseJsonBody(big('assistant'), small, broken);
    assert.equal(prevalidated(b, broken), false);
  });
});

describe('large JSON bodies of {base_url} requests, read as they come', () => {
  let env: Env;
  before(async () => {
    env = await setup('pglite');
  });
  after(() => env.close());

  const post = (body: string | Buffer, headers: Record<string, string> = {}, path = '/v1/responses/input_tokens') =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const u = new URL(env.url + path);
      const r = http.request(
        { host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { authorization: `Bearer ${env.key}`, 'content-type': 'application/json', ...headers } },
        (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      r.on('error', reject);
      r.end(body);
    });

  test('the same answer as a small body, with no one copy of the whole body on the event loop; charset and case of the type do not matter', async () => {
    const input = Array.from({ length: 400 }, (_, i) => ({ role: 'user', content: `${i} ` + 'w'.repeat(10_000) }));
    const text = JSON.stringify({ model: MODEL, input });
    const original = Buffer.concat;
    let largest = 0;
    Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
      const out = original(list, total);
      largest = Math.max(largest, out.length);
      return out;
    }) as typeof Buffer.concat;
    let big: { status: number; text: string };
    try {
      big = await post(text, { 'content-type': 'Application/JSON; charset=utf-8' });
    } finally {
      Buffer.concat = original;
    }
    assert.equal(big.status, 200, big.text);
    assert.ok(largest < text.length / 4, `a Buffer.concat of ${largest} bytes for a ${text.length}-byte body`);
    // the count of the same input sent in four small bodies adds up the same way
    const parts = await Promise.all([0, 1, 2, 3].map((q) => post(JSON.stringify({ model: MODEL, input: input.slice(q * 100, (q + 1) * 100) }))));
    const sum = parts.reduce((n, p) => n + JSON.parse(p.text).input_tokens, 0);
    assert.equal(JSON.parse(big.text).input_tokens, sum - 3 * 3, 'the per-request priming counted once');
  });

  test("the route's schema checks a large body in the worker thread: no Ajv validator runs on this thread, and an invalid one gets the error a small one gets", async () => {
    const items = (n: number, chars: number, bad?: number) => Array.from({ length: n }, (_, i) => ({ role: i === bad ? 'robot' : 'user', content: `${i} ` + 'w'.repeat(chars) }));
    // Chat Completions: its message schema is the slowest to check (4096 messages: 10-45 ms on the event loop)
    const text = JSON.stringify({ model: MODEL, messages: items(4096, 100) });
    assert.ok(text.length > 2 * 256 * 1024);
    const session = new Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 50 });
    await session.post('Profiler.start');
    let res: { status: number; text: string };
    let profile: { nodes: Array<{ id: number; callFrame: { functionName: string } }>; samples?: number[] };
    try {
      res = await post(text, {}, '/v1/chat/completions');
    } finally {
      profile = (await session.post('Profiler.stop')).profile as typeof profile;
      session.disconnect();
    }
    assert.equal(res.status, 200, res.text);
    // Ajv's compiled validators are named validate<n>; on this thread, 4096 items are milliseconds of them
    const ajv = new Set(profile.nodes.filter((n) => /^validate\d+$/.test(n.callFrame.functionName)).map((n) => n.id));
    const hits = (profile.samples ?? []).filter((id) => ajv.has(id)).length;
    assert.equal(hits, 0, `${hits} samples in Ajv's validators on the event loop`);
    // the same refusal, large (worker: invalid, checked again here) and small (here)
    const large = await post(JSON.stringify({ model: MODEL, input: items(3001, 100, 3000) }));
    const smallOne = await post(JSON.stringify({ model: MODEL, input: items(3001, 1, 3000) }));
    assert.equal(large.status, 400);
    assert.equal(large.text.replace(/req_[0-9a-f]+/, ''), smallOne.text.replace(/req_[0-9a-f]+/, ''));
  });

  test('refusals are as before: over the route limit (413), invalid JSON (400), a body cut short (the connection ends, the server goes on)', async () => {
    const over = await post(Buffer.alloc(17 * 1024 * 1024, 0x20));
    assert.equal(over.status, 413, over.text);
    const bad = await post('{"model":"' + MODEL + '","input":"' + 'x'.repeat(400_000));
    assert.equal(bad.status, 400);
    assert.equal(JSON.parse(bad.text).error.code, 'invalid_json');
    // announces 1 MB, sends half and closes
    await new Promise<void>((resolve) => {
      const u = new URL(env.url + '/v1/responses/input_tokens');
      const sock = net.connect(Number(u.port), u.hostname, () => {
        sock.write(`POST /v1/responses/input_tokens HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${env.key}\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n`);
        sock.write('{"model":"' + MODEL + '","input":"' + 'y'.repeat(500_000));
        setTimeout(() => sock.destroy(), 100);
      });
      sock.on('close', () => resolve());
      sock.on('error', () => {});
    });
    const ok = await post(JSON.stringify({ model: MODEL, input: 'z'.repeat(300_000) }));
    assert.equal(ok.status, 200, ok.text);
  });
});
