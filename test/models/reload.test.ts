/**
 * Reloading the model file while serving (issue 21, section 4): the file is checked whole and applied at once to
 * new requests; requests in flight finish on the deployment they started on; unchanged deployments keep their
 * engine and breaker; a refused file changes nothing and says why in one log line. In process, on PGlite and on
 * PostgreSQL, with scripted upstreams; test/cluster/reload.test.ts drives real processes (SIGHUP, the command,
 * workers, the file watch).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Type } from 'typebox';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/wait.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { planReload } from '../../src/models/reload.js';
import { parseModelConfig } from '../../src/models/config.js';
import { EngineRegistry } from '../../src/engines/registry.js';
import { defineProvider, type Provider, type ProviderContext } from '../../src/engines/provider.js';
import { EngineError, type TextEngine } from '../../src/engines/types.js';

/** JSON log lines written by the app (LOG_LEVEL info) */
function logSink() {
  const lines: Array<Record<string, any>> = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { lines, stream };
}

describe('planReload: what a new model file changes', () => {
  const parse = (yaml: string) => parseModelConfig(yaml).models;
  const base = `models:
  - { name: a, provider: openai-compatible, base_url: "http://a/v1", pricing: { input_per_million: 1 } }
  - name: m
    breaker: { failures: 3 }
    deployments:
      - { id: m1, provider: openai-compatible, base_url: "http://m1/v1" }
      - { id: m2, provider: openai-compatible, base_url: "http://m2/v1", rpm: 10 }
  - { name: gone, provider: openai-compatible, base_url: "http://g/v1" }
`;
  test('unchanged models keep their spec object; a changed deployment and a removed model retire their engines and health, nothing else', () => {
    const before = parse(base);
    const after = parse(
      base
        .replace('rpm: 10', 'rpm: 20')
        .replace('failures: 3', 'failures: 4')
        .replace(/ {2}- \{ name: gone.*\n/, '  - { name: new, provider: openai-compatible, base_url: "http://n/v1" }\n'),
    );
    const plan = planReload(before, after);
    assert.deepEqual([plan.added, plan.changed, plan.removed, plan.unchanged], [['new'], ['m'], ['gone'], 1]);
    assert.equal(plan.specs[0], before[0], 'the unchanged model is the same object');
    assert.notEqual(plan.specs[1], before[1]);
    // m1 is the same deployment (same id, same keys): kept; m2's rpm changed: fresh engine and health
    assert.deepEqual(plan.engines.sort(), ['gone', 'm2', 'new']);
    assert.deepEqual(plan.deployments.sort(), ['gone', 'm2', 'new']);
    assert.deepEqual(plan.replaced.map((s) => s.name).sort(), ['gone', 'm']);
  });
  test("a model-level key (price, breaker policy) changes the model, not its deployment's engine or health", () => {
    const plan = planReload(parse(base), parse(base.replace('input_per_million: 1', 'input_per_million: 2')));
    assert.deepEqual(plan.changed, ['a']);
    assert.deepEqual(plan.engines, []);
    assert.deepEqual(plan.deployments, []);
  });
  test('the same file: nothing changes, every spec object is kept', () => {
    const before = parse(base);
    const plan = planReload(before, parse(base));
    assert.deepEqual([plan.added, plan.changed, plan.removed, plan.engines], [[], [], [], []]);
    plan.specs.forEach((s, i) => assert.equal(s, before[i]));
  });
});

describe('the engine registry retires engines of a replaced configuration', () => {
  const ctx: ProviderContext = { env: {}, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
  test('new requests get a new engine at once; the old one closes only when its work is done; a stale spec is refused (503, retryable)', async () => {
    const made: Array<{ key: string; closed: boolean; retired: boolean; release: () => void }> = [];
    const provider = defineProvider({
      name: 'fake',
      summary: 'fake',
      serves: ['text'],
      options: Type.Object({ key: Type.String() }),
      create: {
        text: async (s) => {
          let release!: () => void;
          const idle = new Promise<void>((r) => (release = r));
          const rec = { key: s.key, closed: false, retired: false, release };
          made.push(rec);
          return {
            kind: 'fake',
            generate: () => (async function* () {})(),
            countTokens: async () => 0,
            close: async () => {
              rec.closed = true;
            },
            retire: async () => {
              rec.retired = true;
              await idle;
              rec.closed = true;
            },
          } satisfies TextEngine;
        },
      },
    });
    const registry = new EngineRegistry(new Map<string, Provider>([['fake', provider as unknown as Provider]]), ctx);
    const old = { name: 'd', provider: 'fake', type: 'text' as const, key: 'old' };
    const next = { name: 'd', provider: 'fake', type: 'text' as const, key: 'new' };
    const first = await registry.text(old);
    assert.equal(await registry.text(old), first, 'one engine per name');
    const retired = registry.retire(['d'], [old]);
    const fresh = await registry.text(next);
    assert.notEqual(fresh, first);
    assert.deepEqual(
      made.map((m) => m.key),
      ['old', 'new'],
    );
    await waitFor(() => made[0]!.retired, { what: 'the old engine told to retire', timeoutMs: 15_000 });
    assert.equal(made[0]!.closed, false, 'closed while its work was under way');
    // a request that took the old spec before the reload never makes an engine of the old keys under the name
    await assert.rejects(registry.text(old), (e: unknown) => e instanceof EngineError && e.status === 503 && e.retryable === true && /changed with a reload/.test(e.message));
    assert.equal(await registry.text(next), fresh);
    made[0]!.release();
    await retired;
    assert.equal(made[0]!.closed, true);
    assert.equal(made[1]!.closed, false);
    await registry.close();
    assert.equal(made[1]!.closed, true);
  });
});

for (const db of testDatabases()) {
  describe(`reloading the model file on ${db}`, () => {
    let a: ScriptedUpstream;
    let b: ScriptedUpstream;
    let t: TestApp & { url?: string };
    let key: string;
    let dir: string;
    let file: string;
    const logs = logSink();
    const yaml = (o: { chatUrl: string; pairBModel?: string; pairAModel?: string; extra?: string; gone?: boolean }) => `models:
  - name: chat
    provider: openai-compatible
    base_url: ${o.chatUrl}
    upstream_model: up-chat
    retries: 0
  - name: pair
    retries: 0
    breaker: { failures: 1, cooldown_ms: 600000 }
    deployments:
      - { id: pair-a, provider: openai-compatible, base_url: ${a.url}, weight: 1, upstream_model: ${o.pairAModel ?? 'up-a'} }
      - { id: pair-b, provider: openai-compatible, base_url: ${b.url}, weight: 0, upstream_model: ${o.pairBModel ?? 'up-b'} }
${o.gone === false ? '' : `  - { name: gone, provider: openai-compatible, base_url: ${a.url} }\n`}${o.extra ?? ''}`;
    const call = (path: string, body?: unknown) =>
      fetch(t.url + path, {
        method: body === undefined ? 'GET' : 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const chat = (model: string) => call('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }] });
    const listed = async () => (((await (await call('/v1/models')).json()) as any).data as Array<{ id: string }>).map((m) => m.id).sort();

    before(async () => {
      a = await startScriptedUpstream();
      b = await startScriptedUpstream();
      dir = mkdtempSync(join(tmpdir(), 'portico-reload-'));
      file = join(dir, 'models.yaml');
      writeFileSync(file, yaml({ chatUrl: a.url }));
      t = await buildTestApp({ db, listen: true, builtins: false, env: { PORTICO_CONFIG: file, LOG_LEVEL: 'info', LOG_FORMAT: 'json' }, logDestination: logs.stream });
      key = await t.inferenceKey('rory');
    });
    after(async () => {
      await t?.close();
      await a?.close();
      await b?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test('a stream in flight finishes whole on the old deployment; new requests go to the new one; the old engine closes after the stream', async () => {
      writeFileSync(file, yaml({ chatUrl: a.url }));
      assert.equal((await t.runtime.reloadModels('test')).ok, true);
      a.reset();
      b.reset();
      const pieces = Array.from({ length: 8 }, (_, i) => `p${i} `);
      a.script({ text: pieces, delayMs: 150 });
      const res = await call('/v1/chat/completions', { model: 'chat', stream: true, messages: [{ role: 'user', content: 'slow' }] });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let text = dec.decode((await reader.read()).value);
      assert.match(text, /data: /, 'the stream started');

      // mid-stream: the model now lives on upstream b
      writeFileSync(file, yaml({ chatUrl: b.url }));
      const r = await t.runtime.reloadModels('test');
      assert.deepEqual(r, { ok: true, file, added: [], removed: [], changed: ['chat'], unchanged: 2 });
      const closedLine = () => logs.lines.find((l) => l.msg.startsWith('engines of the replaced deployments closed') && l.engines?.includes('chat'));
      assert.equal(closedLine(), undefined, 'the old engine closed while its stream was running');

      // a new request is served by b at once, while the old stream goes on
      const fresh = await chat('chat');
      assert.equal(fresh.status, 200, await fresh.clone().text());
      assert.equal(b.requests.length, 1);
      assert.equal(b.requests[0]!.body.model, 'up-chat');
      assert.equal(a.requests.length, 1, 'nothing new went to the old upstream');

      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value);
      }
      const chunks = text
        .split('\n\n')
        .map((blk) => blk.replace(/^data: /, '').trim())
        .filter((d) => d && d !== '[DONE]')
        .map((d) => JSON.parse(d));
      assert.equal(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join(''), pieces.join(''), 'every piece arrived');
      assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'the stream ended normally');
      assert.equal(chunks.at(-1).choices.at(-1)?.finish_reason ?? chunks.at(-2)?.choices?.[0]?.finish_reason, 'stop');
      await waitFor(closedLine, { what: 'the old engine to close once its stream ended', timeoutMs: 15_000 });
    });

    test('an unchanged deployment keeps its open breaker and engine; a changed one starts afresh', async () => {
      writeFileSync(file, yaml({ chatUrl: a.url }));
      await t.runtime.reloadModels('test');
      a.reset();
      b.reset();
      // pair-a fails once: its breaker (failures: 1) opens and pair-b serves
      a.script({ status: 500, errorMessage: 'down' });
      const failed = await chat('pair');
      assert.equal(failed.status, 502, await failed.clone().text());
      assert.equal(t.runtime.router.health.peek('pair-a')?.state(Date.now()), 'open');
      assert.equal((await chat('pair')).status, 200);
      assert.equal(b.requests.length, 1, 'pair-b served while pair-a is open');
      const engineA = await t.runtime.engines.text(t.runtime.models.get('pair')!.deployments![0]!);

      // pair-b changes (another upstream model name): pair-a is the same deployment, its breaker stays open
      writeFileSync(file, yaml({ chatUrl: a.url, pairBModel: 'up-b2' }));
      const r = await t.runtime.reloadModels('test');
      assert.deepEqual(r.ok && r.changed, ['pair']);
      assert.equal(t.runtime.router.health.peek('pair-a')?.state(Date.now()), 'open', 'the unchanged deployment kept its breaker');
      assert.equal(await t.runtime.engines.text(t.runtime.models.get('pair')!.deployments![0]!), engineA, 'and its engine');
      b.reset();
      assert.equal((await chat('pair')).status, 200);
      assert.equal(b.requests[0]!.body.model, 'up-b2', 'the changed deployment serves with its new keys');
      assert.equal(a.requests.length, 1, 'the open breaker still keeps pair-a out');

      // pair-a changes: fresh health (closed breaker), a new engine
      writeFileSync(file, yaml({ chatUrl: a.url, pairBModel: 'up-b2', pairAModel: 'up-a2' }));
      assert.equal((await t.runtime.reloadModels('test')).ok, true);
      assert.equal(t.runtime.router.health.peek('pair-a'), undefined, 'the changed deployment forgot its breaker');
      a.reset();
      assert.equal((await chat('pair')).status, 200);
      assert.equal(a.requests.length, 1, 'pair-a serves again');
      assert.equal(a.requests[0]!.body.model, 'up-a2');
      assert.notEqual(await t.runtime.engines.text(t.runtime.models.get('pair')!.deployments![0]!), engineA);
    });

    test('a model added is served at once; a model removed stops being listed and answers model_not_found', async () => {
      writeFileSync(file, yaml({ chatUrl: a.url }));
      await t.runtime.reloadModels('test');
      assert.ok((await listed()).includes('gone'));
      writeFileSync(file, yaml({ chatUrl: a.url, gone: false, extra: `  - { name: added, provider: openai-compatible, base_url: ${b.url}, upstream_model: up-added }\n` }));
      const r = await t.runtime.reloadModels('test');
      assert.deepEqual(r.ok && [r.added, r.removed], [['added'], ['gone']]);
      assert.deepEqual(await listed(), ['added', 'chat', 'pair']);
      b.reset();
      assert.equal((await chat('added')).status, 200);
      assert.equal(b.requests[0]!.body.model, 'up-added');
      const gone = await chat('gone');
      assert.equal(gone.status, 404);
      assert.equal(((await gone.json()) as any).error.code, 'model_not_found');
    });

    test('a file the check refuses changes nothing: one error line naming the problem, the old configuration serves', async () => {
      writeFileSync(file, yaml({ chatUrl: a.url }));
      await t.runtime.reloadModels('test');
      const before = await listed();
      const bad: Array<[string, RegExp]> = [
        [yaml({ chatUrl: 'http://127.0.0.1:99999/v1' }), /models\[0\] \(chat\): 'base_url' has the port 99999, outside 1-65535/],
        [
          yaml({ chatUrl: a.url, extra: `  - { name: keyed, provider: openai-compatible, base_url: ${b.url}, api_key_env: PORTICO_TEST_RELOAD_UNSET }\n` }),
          /'api_key_env' names PORTICO_TEST_RELOAD_UNSET, which is not set/,
        ],
        ['models:\n  - name: chat\n    provider: openai-compatible\n    base_url: [\n', /not valid YAML/],
        ['model_list: []\n', /'model_list' is LiteLLM's key/],
      ];
      for (const [text, re] of bad) {
        writeFileSync(file, text);
        const mark = logs.lines.length;
        const r = await t.runtime.reloadModels('test');
        assert.equal(r.ok, false);
        assert.match(!r.ok ? r.error : '', re);
        const lines = logs.lines.slice(mark);
        const errors = lines.filter((l) => l.level >= 50);
        assert.equal(errors.length, 1, JSON.stringify(lines));
        assert.match(errors[0]!.msg, re);
        assert.match(errors[0]!.msg, /^model file not reloaded: .*; the previous configuration keeps serving$/);
        assert.deepEqual(await listed(), before);
        a.reset();
        assert.equal((await chat('chat')).status, 200);
        assert.equal(a.requests[0]!.body.model, 'up-chat', 'served as before');
      }
      // a missing file too
      rmSync(file);
      const missing = await t.runtime.reloadModels('test');
      assert.equal(missing.ok, false);
      assert.match(!missing.ok ? missing.error : '', /cannot read .*models\.yaml/);
      assert.deepEqual(await listed(), before);
      writeFileSync(file, yaml({ chatUrl: a.url }));
    });
  });
}
