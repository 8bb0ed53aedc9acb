// Issue 22 §3, "History is bounded like every other input": a continuation (previous_response_id) measures its
// chain in SQL before it reads any of it; past RESPONSES_MAX_CHAIN_BYTES it is a 400 (truncation disabled) or loses
// its oldest turns (auto); with a known context window only the newest turns the model can read are read; and one
// key's chain loads are bounded (RESPONSES_MAX_CHAIN_LOADS_PER_KEY, a bounded queue, then 429), so another key's
// requests do not wait behind them. On PGlite and PostgreSQL.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { keyedCalls } from '../helpers/calls.js';
import type { ModelSpec } from '../../src/models/config.js';
import { ResponseStore, type ChainLink } from '../../src/responses/store.js';
import type { ResponseObject } from '../../src/responses/object.js';
import type { StoredItem } from '../../src/responses/input.js';
import { eventually, expectError } from './util.js';

const CAP = 2 * 1024 * 1024;
const WINDOW = 4000;

/** a stored turn: one user message of `pad` bytes (marked by its tag) and one answer */
function turnObject(id: string, previous: string | null, tag: string): ResponseObject {
  return {
    id,
    object: 'response',
    model: 'gpt-test',
    status: 'completed',
    background: false,
    previous_response_id: previous,
    created_at: 1,
    output: [{ id: `msg_out_${id}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: `answer ${tag}`, annotations: [] }] }],
  } as unknown as ResponseObject;
}

/** What the ResponseStore was asked while a test ran: the chains measured and the responses read whole. */
interface StoreSpy {
  /** every chainSizes answer */
  measured: ChainLink[][];
  /** ids read with their items, by chainPart or chain */
  read: string[];
  restore(): void;
}

function spyStore(): StoreSpy {
  const p = ResponseStore.prototype;
  const { chainSizes, chainPart, chain } = p;
  const spy: StoreSpy = {
    measured: [],
    read: [],
    restore() {
      Object.assign(p, { chainSizes, chainPart, chain });
    },
  };
  p.chainSizes = async function (this: ResponseStore, ...args: Parameters<typeof chainSizes>) {
    const r = await chainSizes.apply(this, args);
    spy.measured.push(r);
    return r;
  };
  p.chainPart = async function (this: ResponseStore, ...args: Parameters<typeof chainPart>) {
    spy.read.push(...args[0]);
    return chainPart.apply(this, args);
  };
  p.chain = async function (this: ResponseStore, ...args: Parameters<typeof chain>) {
    const r = await chain.apply(this, args);
    spy.read.push(...r.map((c) => c.id));
    return r;
  };
  return spy;
}

for (const db of testDatabases()) {
  describe(`bounded history (${db})`, () => {
    let t: TestApp & { url?: string };
    let up: ScriptedUpstream;
    let store: ResponseStore;
    let alice: { key: string; id: string };
    let bob: { key: string; id: string };
    let call: ReturnType<typeof keyedCalls>['call'];

    const makeKey = async (user: string) => {
      const res = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${await t.token(user)}` }, payload: { name: 'k' } });
      assert.equal(res.statusCode, 200, res.body);
      const d = res.json().data;
      return { key: d.api_key as string, id: d.id as string };
    };

    const inputOf = (id: string, tag: string, k: number, pad: number): StoredItem[] => [
      { id: `msg_in_${id}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `question ${tag}${k} ` + 'x'.repeat(pad) }] },
    ];
    /** a chain of `turns` stored responses of `user`, each input `pad` bytes of text; ids oldest first */
    const chain = async (user: string, tag: string, turns: number, pad: number): Promise<string[]> => {
      const ids: string[] = [];
      for (let k = 0; k < turns; k++) {
        const id = `resp_${tag}_${k}`;
        await store.insert({
          id,
          userId: user,
          orgId: 'default',
          keyId: 'k',
          object: turnObject(id, ids[k - 1] ?? null, `${tag}${k}`),
          inputItems: inputOf(id, tag, k, pad),
          request: null,
        });
        ids.push(id);
      }
      return ids;
    };
    /** the turns (by number) whose question reached the upstream, in order */
    const turnsSent = (messages: Array<{ role: string; content: unknown }>, tag: string) =>
      messages.flatMap((m) => {
        const r = typeof m.content === 'string' ? new RegExp(`^question ${tag}(\\d+) `).exec(m.content) : null;
        return r ? [Number(r[1])] : [];
      });
    const as = (k: { key: string }) => ({ authorization: `Bearer ${k.key}` });

    before(async () => {
      up = await startScriptedUpstream();
      const models: ModelSpec[] = [
        { name: 'gpt-test', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0 } as ModelSpec,
        { name: 'window', provider: 'openai-compatible', base_url: up.url, type: 'text', retries: 0, context_window: WINDOW } as ModelSpec,
      ];
      t = await buildTestApp({
        db,
        listen: true,
        models,
        env: { RESPONSES_MAX_CHAIN_BYTES: String(CAP), RESPONSES_MAX_CHAIN_LOADS_PER_KEY: '2', RESPONSES_MAX_QUEUED_CHAIN_LOADS_PER_KEY: '1' },
      });
      store = new ResponseStore(t.core.db.db);
      alice = await makeKey('alice');
      bob = await makeKey('bob');
      call = keyedCalls(t.url!, alice.key, up).call;
    });
    after(async () => {
      await t.close();
      await up.close();
    });

    test('sizes are written with each response and summed in SQL; a row stored before them is measured there', async () => {
      const ids = await chain('carol', 'sz', 3, 1000);
      const rows = (
        await sql<{ id: string; input_bytes: string | number; object_bytes: string | number }>`
          select id, input_bytes, object_bytes from responses where id in (${sql.join(ids)})`.execute(t.core.db.db)
      ).rows;
      for (const r of rows) {
        // the bytes of the JSON text sent for each value
        const k = ids.indexOf(r.id);
        assert.equal(Number(r.input_bytes), Buffer.byteLength(JSON.stringify(inputOf(r.id, 'sz', k, 1000))));
        assert.equal(Number(r.object_bytes), Buffer.byteLength(JSON.stringify(turnObject(r.id, ids[k - 1] ?? null, `sz${k}`))));
      }
      const links = await store.chainSizes(ids[2]!, 'carol', 1e9);
      assert.deepEqual(
        links.map((l) => l.id),
        [...ids].reverse(),
      );
      const written = new Map(rows.map((r) => [r.id, Number(r.input_bytes) + Number(r.object_bytes)]));
      for (const l of links) assert.equal(l.bytes, written.get(l.id));
      // a row of an older version has no sizes: measured in SQL (jsonb's text), never read here
      await sql`update responses set input_bytes = null, object_bytes = null where id = ${ids[0]!}`.execute(t.core.db.db);
      const legacy = (await store.chainSizes(ids[2]!, 'carol', 1e9))[2]!;
      assert.ok(Math.abs(legacy.bytes - written.get(ids[0]!)!) < 100, `${legacy.bytes} vs ${written.get(ids[0]!)}`);
      // the walk stops at the first response that brings the total past the bytes asked for
      assert.deepEqual(
        (await store.chainSizes(ids[2]!, 'carol', links[0]!.bytes)).map((l) => l.id),
        [ids[2], ids[1]],
      );
      assert.deepEqual(
        (await store.chainSizes(ids[2]!, 'carol', 10)).map((l) => l.id),
        [ids[2]],
      );
      assert.deepEqual(await store.chainSizes(ids[2]!, 'someone else', 1e9), []);
    });

    test('a chain past RESPONSES_MAX_CHAIN_BYTES -> 400 conversation_too_large on previous_response_id, refused without reading it', async () => {
      // 40 turns of 256 KiB: 10 MiB, five times the cap
      const ids = await chain('alice', 'big', 40, 256 * 1024);
      const sent = up.requests.length;
      const spy = spyStore();
      let err;
      try {
        err = await expectError(
          await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: ids[39], input: 'next' }),
          400,
          'conversation_too_large',
          'previous_response_id',
        );
      } finally {
        spy.restore();
      }
      assert.match(err.message, new RegExp(`at least \\d+ bytes, more than the ${CAP} bytes`));
      assert.match(err.message, /RESPONSES_MAX_CHAIN_BYTES/);
      assert.equal(Number(/at least (\d+) bytes/.exec(err.message)![1]) > CAP, true);
      // measured only as far as the cap (7 turns fit, the 8th passes it: 8 of the 40), and not one item or object read
      assert.equal(spy.measured.length, 1);
      assert.equal(spy.measured[0]!.length, 8, `${spy.measured[0]!.length} turns measured`);
      assert.deepEqual(spy.read, []);
      assert.equal(up.requests.length, sent, 'nothing reached the upstream');
      // in Chinese too
      const zh = await expectError(
        await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: ids[39], input: 'next' }, { 'accept-language': 'zh-CN' }),
        400,
        'conversation_too_large',
      );
      assert.match(zh.message, /RESPONSES_MAX_CHAIN_BYTES/);
      assert.match(zh.message, /[\u4e00-\u9fff]/);
    });

    test('truncation auto: the oldest turns that do not fit the cap are dropped; the newest reach the upstream, in order', async () => {
      const ids = await chain('alice', 'auto', 40, 256 * 1024);
      const spy = spyStore();
      up.script({ text: 'ok' });
      let res;
      try {
        res = await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: ids[39], input: 'next', truncation: 'auto' });
      } finally {
        spy.restore();
      }
      assert.equal(res.status, 200, await res.clone().text());
      const body = up.requests[up.requests.length - 1]!.body;
      const turns = turnsSent(body.messages, 'auto');
      // as many of the newest turns as fit the cap with the input, oldest first
      const sizes = spy.measured[0]!;
      let total = 0;
      let fit = 0;
      while (fit < sizes.length && total + sizes[fit]!.bytes <= CAP - 200) total += sizes[fit++]!.bytes;
      assert.equal(fit, 7, '7 turns of 256 KiB fit 2 MiB with the input');
      assert.deepEqual(
        turns,
        Array.from({ length: fit }, (_, i) => 40 - fit + i),
      );
      assert.deepEqual(body.messages[body.messages.length - 1], { role: 'user', content: 'next' });
      // only what was kept was read
      assert.deepEqual(new Set(spy.read), new Set(ids.slice(40 - fit)));
      const r = await res.json();
      assert.equal(r.truncation, 'auto');
      assert.equal(r.previous_response_id, ids[39]);
    });

    test('a known context window: only the newest turns are read (auto: the model gets what fits; disabled: 400 context_length_exceeded)', async () => {
      // 16 turns of 100 KiB: under the byte cap, far over a 4000-token window
      const ids = await chain('alice', 'win', 16, 100 * 1024);
      const spy = spyStore();
      try {
        up.script({ text: 'ok' });
        const res = await call('POST', '/v1/responses', { model: 'window', previous_response_id: ids[15], input: 'next', truncation: 'auto' });
        assert.equal(res.status, 200, await res.clone().text());
        // the newest turn alone is past the window: what reaches the model is the input (the turns were dropped by fit)
        const body = up.requests[up.requests.length - 1]!.body;
        assert.deepEqual(body.messages[body.messages.length - 1], { role: 'user', content: 'next' });
        // one part of at most 1 MiB: the newest 10 turns; they pass the window, so the 6 older ones are never read
        assert.deepEqual(spy.read, ids.slice(6), `${spy.read.length} of 16 turns read`);
        assert.ok(!spy.read.includes(ids[0]!), 'the oldest turn was not read');
        const readAuto = spy.read.length;
        spy.read.length = 0;
        const err = await expectError(
          await call('POST', '/v1/responses', { model: 'window', previous_response_id: ids[15], input: 'next' }),
          400,
          'context_length_exceeded',
          'input',
        );
        assert.match(err.message, new RegExp(`more than \\d+ tokens .*${WINDOW} tokens`));
        assert.equal(spy.read.length, readAuto, 'the same newest turns read, the older ones never');
      } finally {
        spy.restore();
      }
    });

    test('a known context window, a chain that fits: the whole conversation is sent, read in one part as before', async () => {
      const ids = await chain('alice', 'fits', 3, 100);
      const spy = spyStore();
      up.script({ text: 'ok' }, { text: 'ok' });
      try {
        assert.equal((await call('POST', '/v1/responses', { model: 'window', previous_response_id: ids[2], input: 'next' })).status, 200);
        const withWindow = up.requests[up.requests.length - 1]!.body.messages;
        assert.equal((await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: ids[2], input: 'next' })).status, 200);
        const without = up.requests[up.requests.length - 1]!.body.messages;
        assert.deepEqual(withWindow, without);
        assert.deepEqual(turnsSent(withWindow, 'fits'), [0, 1, 2]);
        assert.deepEqual(
          withWindow.map((m: { role: string }) => m.role),
          ['user', 'assistant', 'user', 'assistant', 'user', 'assistant', 'user'],
        );
        assert.deepEqual(spy.read, [...ids, ...ids]);
      } finally {
        spy.restore();
      }
    });

    test("one key's chain loads are bounded (2 at once, 1 waiting, then 429); another key is served meanwhile", async () => {
      const [a] = (await chain('alice', 'held', 1, 10)).slice(-1);
      const [b] = (await chain('bob', 'free', 1, 10)).slice(-1);
      const loads = t.runtime.responses.service.chainLoads;
      // alice's chain measurements wait on a gate the test opens; bob's do not
      const p = ResponseStore.prototype;
      const original = p.chainSizes;
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      let held = 0;
      p.chainSizes = async function (this: ResponseStore, ...args: Parameters<typeof original>) {
        if (args[1] === 'alice') {
          held++;
          await gate;
        }
        return original.apply(this, args);
      };
      const reply = up.defaultReply;
      try {
        up.defaultReply = { text: 'ok' };
        const first = [0, 1].map(() => call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: a, input: 'next' }));
        await eventually(async () => held === 2 && loads.state(alice.id).running === 2, 5000, "alice's two loads held");
        const queued = call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: a, input: 'next' });
        await eventually(async () => loads.state(alice.id).waiting === 1, 5000, 'one waiting');
        assert.equal(held, 2, 'the waiting one has not started to read');
        const refused = await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: a, input: 'next' });
        assert.ok(Number(refused.headers.get('retry-after')) >= 1, `retry-after ${refused.headers.get('retry-after')}`);
        const err = await expectError(refused, 429, 'rate_limit_exceeded', 'previous_response_id');
        assert.match(err.message, /at most 2 at once, 1 waiting/);
        // bob's continuation and alice's plain request are served while alice's loads are held
        const other = await call('POST', '/v1/responses', { model: 'gpt-test', previous_response_id: b, input: 'hello' }, as(bob));
        assert.equal(other.status, 200, await other.clone().text());
        assert.equal((await other.json()).previous_response_id, b);
        assert.equal((await call('POST', '/v1/responses', { model: 'gpt-test', input: 'plain' })).status, 200);
        assert.deepEqual(loads.state(alice.id), { running: 2, waiting: 1 }, 'still held');
        assert.deepEqual(loads.state(bob.id), { running: 0, waiting: 0 });
        open();
        for (const r of await Promise.all([...first, queued])) assert.equal(r.status, 200, await r.text());
        assert.equal(held, 3);
        assert.deepEqual(loads.state(alice.id), { running: 0, waiting: 0 });
      } finally {
        open();
        p.chainSizes = original;
        up.defaultReply = reply;
      }
    });
  });
}
