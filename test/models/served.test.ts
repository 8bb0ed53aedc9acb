/**
 * Models a running server offers without a restart: a model pulled while it runs is listed and answers at
 * once (the real `portico models pull` against a local hub), one removed stops at once; a configured model
 * whose file is missing is listed, said in /readyz, and answered 503 without the server's path.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { FakeHub } from '../helpers/fake-hub.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import { portico } from '../cli/helpers.js';
import type { ModelSpec } from '../../src/models/spec.js';
import { ModelRegistry } from '../../src/models/registry.js';
import type { AppError } from '../../src/platform/errors.js';

async function eventually<T>(f: () => Promise<T | undefined>, ms: number, what: string): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('pulled models are served at once, and a missing model file is said, not hidden', () => {
  let hub: FakeHub;
  let t: TestApp & { url?: string };
  let modelsDir: string;
  let client: OpenAI;
  const missing = join(tmpdir(), 'portico-no-such-dir', 'absent-model.gguf');
  before(async () => {
    hub = await new FakeHub().start();
    hub.addRepo({ owner: 'acme', repo: 'Tiny-Chat-GGUF', files: [{ path: 'tiny-chat-Q4_K_M.gguf', data: readFileSync(await makeTinyGguf()) }] });
    modelsDir = mkdtempSync(join(tmpdir(), 'portico-served-'));
    t = await buildTestApp({
      listen: true,
      env: { MODELS_DIR: modelsDir },
      models: [{ name: 'gone-local', provider: 'llama', type: 'text', path: missing } as ModelSpec],
      runtime: { warmUp: false },
    });
    client = new OpenAI({ apiKey: await t.inferenceKey('puller'), baseURL: `${t.url}/v1`, maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await hub.close();
    rmSync(modelsDir, { recursive: true, force: true });
  });

  test('a configured GGUF that does not exist: listed, /readyz says so, 503 without any server path', async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    assert.ok(ids.includes('gone-local'));
    const ready = await (await fetch(`${t.url}/readyz`)).json();
    assert.equal(ready.status, 'degraded');
    assert.match(ready.checks.models, /gone-local \(model file not found/);
    assert.ok(!JSON.stringify(ready).includes(missing), 'no path in /readyz');
    const err = await client.responses.create({ model: 'gone-local', input: 'hi' }).catch((e) => e);
    assert.equal(err.status, 503);
    assert.equal(err.code, 'engine_unavailable');
    assert.ok(!JSON.stringify(err.error).includes('portico-no-such-dir'), 'no path to the client');
  });

  test('portico models pull while the server runs: listed and answering at once; rm: gone at once', async () => {
    const env = { MODELS_DIR: modelsDir, PORTICO_HF_ENDPOINT: hub.url, DATA_DIR: modelsDir };
    const pulled = await portico(['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--name', 'tiny'], env);
    assert.equal(pulled.code, 0, pulled.stderr);
    const names = await eventually(
      async () => {
        const ids = (await client.models.list()).data.map((m) => m.id);
        return ids.includes('tiny') ? ids : undefined;
      },
      10_000,
      'the pulled model to be listed',
    );
    assert.ok(names.includes('tiny-chat:q4_k_m'), `the default name too: ${names.join(', ')}`);
    const r = await client.responses.create({ model: 'tiny', input: 'Say hi', max_output_tokens: 4 });
    assert.ok(r.status === 'completed' || r.status === 'incomplete', r.status);
    assert.ok((r.usage?.output_tokens ?? 0) > 0);

    const rm = await portico(['models', 'rm', 'tiny-chat:q4_k_m'], env);
    assert.equal(rm.code, 0, rm.stderr);
    await eventually(async () => ((await client.models.list()).data.some((m) => m.id === 'tiny') ? undefined : true), 10_000, 'the removed model to be gone');
    const err = await client.responses.create({ model: 'tiny', input: 'hi' }).catch((e) => e);
    assert.equal(err.status, 404);
    assert.equal(err.code, 'model_not_found');
  });

  test('no text model at all: model_not_found says how to get one', () => {
    const empty = new ModelRegistry([]);
    assert.throws(
      () => empty.require('gpt-4o', 'text'),
      (e: AppError) => e.code === 'model_not_found' && /portico models pull hf:/.test(e.message),
    );
    // with text models, the ones that exist are named instead
    assert.throws(
      () => t.services.models.require('nothing-here', 'text'),
      (e: AppError) => /Available: gone-local/.test(e.message) && !/portico models pull/.test(e.message),
    );
  });
});
