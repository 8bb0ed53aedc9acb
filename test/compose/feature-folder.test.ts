/**
 * "A new endpoint is one folder plus one line" (issue 23): the images feature of test/fixtures/images, added to
 * the runtime by one line and nothing else. What it declares reaches every layer that needs it: the keys accept
 * its scope (and list it in their refusals), the page is offered it, the gate enforces it, its usage is recorded
 * under its operation and priced by the unit it declares (the model file takes that unit's pricing key), and its
 * calls go through the router. What the runtime refuses: a route scope no module declares, a price of a unit no
 * module meters, a usage record of an undeclared operation.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Type } from 'typebox';
import { buildTestApp, TEST_JWT_SECRET, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { loadConfig } from '../../src/platform/config.js';
import { createCore } from '../../src/compose/core.js';
import { createRuntime, type RuntimeOptions } from '../../src/compose/runtime.js';
import { parseModelConfig, type ModelSpec } from '../../src/models/config.js';
import type { FeatureModule } from '../../src/platform/module.js';
import { createImagesModule } from '../fixtures/images/module.js';
import { PER_IMAGE } from '../fixtures/images/service.js';

/** a model of two deployments on the scripted upstream, priced per image (checked as the serving runtime checks it) */
const imageModels = (url: string): ModelSpec[] =>
  parseModelConfig(
    [
      'models:',
      '  - name: img-1',
      '    type: text',
      '    retries: 1',
      '    retry_backoff_ms: 0',
      '    pricing: { per_image: 0.04 }',
      '    deployments:',
      `      - { id: img-a, provider: openai-compatible, base_url: "${url}", upstream_model: upstream-image }`,
      `      - { id: img-b, provider: openai-compatible, base_url: "${url}", upstream_model: upstream-image }`,
      '',
    ].join('\n'),
    'models.yaml',
    { units: [PER_IMAGE] },
  ).models;

describe('a feature that is one folder: POST /v1/images/generations (test/fixtures/images)', () => {
  let t: TestApp;
  let up: ScriptedUpstream;
  before(async () => {
    up = await startScriptedUpstream();
    // the one line: the module in the runtime's list (a test adds it through the options)
    t = await buildTestApp({ models: imageModels(up.url), runtime: { extraModules: [(deps) => createImagesModule(deps)] } });
  });
  after(async () => {
    await t?.close();
    await up?.close();
  });

  const generate = (key: string, body: unknown) =>
    t.app.inject({ method: 'POST', url: '/v1/images/generations', headers: { authorization: `Bearer ${key}` }, payload: body as Record<string, unknown> });
  const usage = async (user: string) => {
    const res = await t.app.inject({ method: 'GET', url: '/v1/portal/query/usage?group_by=operation,model', headers: { authorization: `Bearer ${await t.token(user)}` } });
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data.list as Array<{ operation: string; model: string; requests: number; characters: number; cost: number }>;
  };

  test('its scope is collected after the built-in ones: the keys take it and list it, the page is offered it', async () => {
    assert.deepEqual(t.runtime.declared.scopes, ['responses', 'chat', 'embeddings', 'audio', 'anthropic-messages', 'realtime', 'images']);
    assert.ok(t.runtime.declared.operations.includes('images'));
    assert.deepEqual(
      t.runtime.declared.units.find((u) => u.unit === 'images'),
      PER_IMAGE,
    );
    const token = await t.token('carol');
    const made = await t.app.inject({
      method: 'POST',
      url: '/v1/portal/api-keys',
      headers: { authorization: `Bearer ${token}` },
      payload: { name: 'images only', scopes: ['images'] },
    });
    assert.equal(made.statusCode, 200, made.body);
    assert.deepEqual(made.json().data.scopes, ['images']);
    const typo = await t.app.inject({ method: 'POST', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${token}` }, payload: { name: 'typo', scopes: ['image'] } });
    assert.equal(typo.statusCode, 400);
    assert.equal(
      typo.json().meta.message,
      "Invalid value for 'scopes[0]': 'image' is not a scope of inference keys. Allowed values: 'responses', 'chat', 'embeddings', 'audio', 'anthropic-messages', 'realtime', 'images', 'models', '*', 'model:NAME'.",
    );
    const me = await t.app.inject({ method: 'GET', url: '/v1/portal/me', headers: { authorization: `Bearer ${token}` } });
    assert.equal(me.statusCode, 200, me.body);
    assert.deepEqual(me.json().data.api_keys.scopes, ['responses', 'chat', 'embeddings', 'audio', 'anthropic-messages', 'realtime', 'images', 'model:img-1']);
  });

  test('the gate enforces it: a key limited to chat is refused before the upstream is called', async () => {
    const key = await t.inferenceKey('dave', { scopes: ['chat'] });
    const before = up.requests.length;
    const res = await generate(key, { model: 'img-1', prompt: 'a cat' });
    assert.equal(res.statusCode, 403, res.body);
    assert.equal(res.json().error.code, 'insufficient_scope');
    assert.equal(up.requests.length, before);
  });

  test('forwarded through the router (a failed try retried on a deployment), recorded as images and priced per image', async () => {
    const key = await t.inferenceKey('erin', { scopes: ['images'] });
    const answer = { created: 1, data: [{ url: 'https://img.example/1.png' }, { url: 'https://img.example/2.png' }] };
    up.script({ status: 500, errorMessage: 'the first try fails' }, { json: answer });
    const res = await generate(key, { model: 'img-1', prompt: 'two cats', n: 2, size: '256x256' });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json(), answer);
    assert.equal(res.headers['x-portico-retries'], '1');
    const sent = up.requests.slice(-2);
    assert.deepEqual(
      sent.map((r) => r.path),
      ['/v1/images/generations', '/v1/images/generations'],
    );
    assert.deepEqual(sent[1]!.body, { model: 'upstream-image', prompt: 'two cats', n: 2, size: '256x256' });
    const rows = await usage('erin');
    assert.equal(rows.length, 1, JSON.stringify(rows));
    assert.equal(rows[0]!.operation, 'images');
    assert.equal(rows[0]!.model, 'img-1');
    assert.equal(rows[0]!.requests, 1);
    // 2 images at 0.04 credits each
    assert.equal(rows[0]!.cost, 0.08);
  });

  test('an upstream refusal is the engine-error mapping, and nothing is charged', async () => {
    const key = await t.inferenceKey('frank', { scopes: ['images'] });
    up.script({ status: 400, errorMessage: 'prompt refused by the upstream' });
    const res = await generate(key, { model: 'img-1', prompt: 'no' });
    assert.equal(res.statusCode, 400, res.body);
    assert.match(res.json().error.message, /prompt refused by the upstream/);
    assert.deepEqual(await usage('frank'), []);
  });

  test('a usage record of an operation no module declares is refused', async () => {
    await assert.rejects(
      t.core.usage.record({ requestId: 'r-1', key: { keyId: 'key_x', userId: 'u', orgId: 'default' }, model: 'img-1', operation: 'imagez' }),
      /usage operation 'imagez' is not declared by any feature module/,
    );
  });
});

/** Builds a runtime on its own core and gives the error that refused it. */
async function refused(models: ModelSpec[], opts: RuntimeOptions): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), 'portico-test-'));
  const config = loadConfig({ DATA_DIR: dataDir, PORTICO_DB: 'memory', DATABASE_URL: '', JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'silent', PORT: '0' });
  const core = await createCore(config, { role: 'serve', models });
  try {
    const runtime = await createRuntime(core, { builtinModels: false, pulledModels: false, warmUp: false, ...opts });
    await runtime.app.close();
    await runtime.close();
  } catch (e) {
    return (e as Error).message;
  } finally {
    await core.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  assert.fail('the runtime was built');
}

describe('what the runtime refuses when it collects the declarations', () => {
  test('a route that needs a scope no module declares', async () => {
    const undeclared: FeatureModule = {
      name: 'stray',
      routes: { api: (app) => void app.post('/stray', { config: { scope: 'stray' }, schema: { body: Type.Object({}) } }, async () => ({})) },
    };
    assert.match(await refused([], { extraModules: [undeclared] }), /POST \/v1\/stray: the route scope 'stray' is declared by no module/);
  });

  test('a price of a unit no module meters (the closest one named), and a scope two modules declare', async () => {
    const models = [{ name: 'img-1', provider: 'openai-compatible', type: 'text', base_url: 'http://127.0.0.1:9/v1', pricing: { per_imag: 1 } }] as ModelSpec[];
    assert.match(await refused(models, { extraModules: [(d) => createImagesModule(d)] }), /img-1: unknown key 'pricing\.per_imag' \(did you mean 'per_image'\?\)/);
    const twice: FeatureModule = { name: 'chat-again', scope: 'chat', routes: {} };
    assert.match(await refused([], { extraModules: [twice] }), /module chat-again: the route scope 'chat' is declared by another module too/);
  });
});
