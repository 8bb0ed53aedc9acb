// Models at run time: every bad entry gets the model file checker's message as 400 invalid_model_entry, a name taken
// by any other model 409 conflict, a change to a model that is not stored 409 read_only, an unknown one 404.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import { callers, type Callers } from './helpers.js';

for (const db of testDatabases()) {
  describe(`admin API: stored models refused with the checker's messages (${db})`, () => {
    let t: TestApp;
    let c: Callers;
    let up: ScriptedUpstream;
    let dir: string;
    before(async () => {
      up = await startScriptedUpstream();
      dir = mkdtempSync(join(tmpdir(), 'portico-models-'));
      const file = join(dir, 'models.yaml');
      writeFileSync(file, `models:\n  - name: filemodel\n    deployments:\n      - id: file-dep\n        provider: openai-compatible\n        base_url: ${up.url}\n`);
      t = await buildTestApp({ db, env: { PORTICO_CONFIG: file, UPSTREAM_KEY_SET: 'x-key-value' } });
      c = await callers(t);
    });
    after(async () => {
      await t.close();
      await up.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown, lang?: string) =>
      t.app.inject({
        method,
        url: `/v1/admin${url}`,
        headers: { ...c.operator, ...(lang ? { 'accept-language': lang } : {}) },
        ...(payload !== undefined ? { payload: payload as never } : {}),
      });
    const base = () => ({ name: 'bad', provider: 'openai-compatible', base_url: up.url });
    const refused = async (entry: unknown, status: number, error: string, message: RegExp, lang?: string) => {
      const res = await call('POST', '/models', { entry }, lang);
      assert.equal(res.statusCode, status, res.body);
      const meta = res.json().meta;
      assert.equal(meta.error, error, res.body);
      assert.match(meta.message, message);
      assert.ok(meta.request_id);
      return meta;
    };
    const nothingStored = async () => assert.equal((await t.core.db.db.selectFrom('stored_models').selectAll().execute()).length, 0);

    test("an unknown key: the checker's message with the closest key", async () => {
      const { base_url, ...rest } = base();
      const meta = await refused(
        { ...rest, base_ur: base_url },
        400,
        'invalid_model_entry',
        /unknown key 'base_ur' for provider openai-compatible \(did you mean 'base_url'\?\); allowed keys: /,
      );
      assert.equal(meta.code, 40013);
      await refused({ ...base(), timeouts: { first_bite_ms: 10 } }, 400, 'invalid_model_entry', /unknown key 'timeouts.first_bite_ms' \(did you mean 'first_byte_ms'\?\)/);
      await refused({ ...base(), context_windw: 10 }, 400, 'invalid_model_entry', /did you mean 'context_window'/);
      await nothingStored();
    });

    test('a wrong provider, a missing base_url, a bad base_url, a bad type', async () => {
      await refused({ ...base(), provider: 'openai' }, 400, 'invalid_model_entry', /unknown provider "openai"; one of: openai-compatible, llama/);
      await refused({ name: 'bad', provider: 'openai-compatible' }, 400, 'invalid_model_entry', /'base_url' is required for provider openai-compatible/);
      await refused({ ...base(), base_url: 'http://127.0.0.1:99999/v1' }, 400, 'invalid_model_entry', /'base_url' has the port 99999, outside 1-65535/);
      await refused({ ...base(), type: 'image' }, 400, 'invalid_model_entry', /'type' must be one of: text, speech, transcription, embeddings/);
      await refused({ name: 'bad' }, 400, 'invalid_model_entry', /'provider' is required/);
      await nothingStored();
    });

    test('bad pricing: a negative price, a unit no feature meters (did you mean), a price the type is never charged', async () => {
      await refused({ ...base(), pricing: { input_per_million: -1 } }, 400, 'invalid_model_entry', /'pricing.input_per_million' must be at least 0/);
      await refused({ ...base(), pricing: { per_charactr: 1 } }, 400, 'invalid_model_entry', /unknown key 'pricing.per_charactr' \(did you mean 'per_character'\?\)/);
      await refused({ ...base(), pricing: { per_character: 1 } }, 400, 'invalid_model_entry', /'pricing.per_character' applies to speech and realtime models only/);
      await refused({ ...base(), pricing: { output_per_million: 'a lot' } }, 400, 'invalid_model_entry', /'pricing.output_per_million' must be a number/);
      await nothingStored();
    });

    test('api_key: only a string or null, only on openai-compatible, not with api_key_env, in each deployment', async () => {
      await refused({ ...base(), api_key: 42 }, 400, 'invalid_model_entry', /'api_key' must be the upstream's key/);
      await refused({ ...base(), api_key: '' }, 400, 'invalid_model_entry', /'api_key' must be the upstream's key/);
      await refused({ ...base(), api_key: 'sk-abc', api_key_env: 'UPSTREAM_KEY_SET' }, 400, 'invalid_model_entry', /'api_key' and 'api_key_env' both give/);
      await refused(
        { name: 'bad', provider: 'llama', path: '/nowhere.gguf', api_key: 'sk-abc' },
        400,
        'invalid_model_entry',
        /'api_key' applies to deployments of openai-compatible and anthropic.* only/,
      );
      await refused(
        { name: 'bad', api_key: 'sk-abc', deployments: [{ provider: 'openai-compatible', base_url: up.url }] },
        400,
        'invalid_model_entry',
        /'api_key' goes in each deployment/,
      );
      await refused({ ...base(), api_key_env: 'NOT_SET_ANYWHERE_42' }, 400, 'invalid_model_entry', /'api_key_env' names NOT_SET_ANYWHERE_42, which is not set/);
      // a key follows its deployment by id: a deployment of a list without one cannot be given a key
      await refused(
        {
          name: 'bad',
          deployments: [
            { id: 'b-1', provider: 'openai-compatible', base_url: up.url },
            { provider: 'openai-compatible', base_url: up.url, api_key: 'sk-abc' },
          ],
        },
        400,
        'invalid_model_entry',
        /'deployments\.1\.api_key' needs the deployment's own 'id': a stored key follows its deployment by id/,
      );
      await refused(
        { name: 'bad', deployments: [{ provider: 'openai-compatible', base_url: up.url, api_key: 'sk-abc' }] },
        400,
        'invalid_model_entry',
        /'deployments\.0\.api_key' needs the deployment's own 'id'/,
        'zh',
      );
      await nothingStored();
    });

    test('a kept key moved to another origin: 400 in both languages, the row unchanged', async () => {
      const made = await call('POST', '/models', { entry: { name: 'moving', provider: 'openai-compatible', base_url: up.url, api_key: 'sk-moving-key-1' } });
      assert.equal(made.statusCode, 201, made.body);
      const stored = await t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', 'moving').executeTakeFirstOrThrow();
      for (const [lang, re] of [
        [
          undefined,
          /^'entry\.api_key': the stored api_key was given for http:\/\/127\.0\.0\.1:\d+, and the base_url now goes to https:\/\/elsewhere\.example; a stored key is never sent to another upstream: type the key for the new one in 'entry\.api_key', or give null to go without one$/,
        ],
        ['zh', /^'entry\.api_key'：存储的 api_key 是为 http:\/\/127\.0\.0\.1:\d+ 设置的，而 base_url 现在指向 https:\/\/elsewhere\.example/],
      ] as const) {
        const res = await call('PUT', '/models/moving', { entry: { provider: 'openai-compatible', base_url: 'https://elsewhere.example/v1' } }, lang);
        assert.equal(res.statusCode, 400, res.body);
        assert.equal(res.json().meta.error, 'invalid_model_entry');
        assert.match(res.json().meta.message, re);
        assert.ok(!res.body.includes('sk-moving-key-1'));
      }
      // the scheme is part of the origin: https on the same host is another upstream too
      const https = await call('PUT', '/models/moving', { entry: { provider: 'openai-compatible', base_url: up.url.replace('http:', 'https:') } });
      assert.equal(https.statusCode, 400, https.body);
      const after = await t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', 'moving').executeTakeFirstOrThrow();
      assert.deepEqual([after.entry, after.secrets, after.updated_at], [stored.entry, stored.secrets, stored.updated_at]);
      assert.equal((await call('DELETE', '/models/moving')).statusCode, 200);
      // azure-openai names its upstream by `endpoint`: the key is bound to that origin
      const azure = await call('POST', '/models', { entry: { name: 'az-moving', provider: 'azure-openai', endpoint: up.url, api_key: 'sk-az-moving-key-1' } });
      assert.equal(azure.statusCode, 201, azure.body);
      const az = await call('PUT', '/models/az-moving', { entry: { provider: 'azure-openai', endpoint: 'https://elsewhere.openai.azure.com' } });
      assert.equal(az.statusCode, 400, az.body);
      assert.match(
        az.json().meta.message,
        /^'entry\.api_key': the stored api_key was given for http:\/\/127\.0\.0\.1:\d+, and the endpoint now goes to https:\/\/elsewhere\.openai\.azure\.com;/,
      );
      assert.ok(!az.body.includes('sk-az-moving-key-1'));
      // the same resource, its key kept; removed on request
      const same = await call('PUT', '/models/az-moving', { entry: { provider: 'azure-openai', endpoint: up.url, deployment: 'gpt-4o' } });
      assert.equal(same.statusCode, 200, same.body);
      assert.deepEqual(same.json().data.secrets, { api_key: true });
      assert.equal((await call('DELETE', '/models/az-moving')).statusCode, 200);
    });

    test('fallbacks name served models of the same type', async () => {
      await refused({ ...base(), fallbacks: ['nope'] }, 400, 'invalid_model_entry', /'fallbacks' names "nope", which is not a model Portico serves/);
      await refused({ ...base(), fallbacks: ['tts-1'] }, 400, 'invalid_model_entry', /'fallbacks' names "tts-1", a speech model, not a text one/);
      await refused({ ...base(), fallbacks: ['bad'] }, 400, 'invalid_model_entry', /names the model itself/);
    });

    test('a name clash: with the file model, a built-in one, a stored one, a deployment id; in Chinese too', async () => {
      const file = await refused({ ...base(), name: 'filemodel' }, 409, 'conflict', /the name 'filemodel' is taken by a model of the model file/);
      assert.equal(file.code, 40903);
      await refused({ ...base(), name: 'filemodel' }, 409, 'conflict', /名称 'filemodel' 已被模型文件中的模型占用/, 'zh-CN');
      await refused({ ...base(), name: 'tts-1' }, 409, 'conflict', /the name 'tts-1' is taken by a built-in model/);
      await refused({ ...base(), name: 'file-dep' }, 409, 'conflict', /the deployment id 'file-dep' is the name or a deployment of the model 'filemodel'/);
      await refused({ name: 'bad', deployments: [{ id: 'filemodel', provider: 'openai-compatible', base_url: up.url }] }, 409, 'conflict', /deployment id 'filemodel'/);
      await nothingStored();
      assert.equal((await call('POST', '/models', { entry: { ...base(), name: 'mine' } })).statusCode, 201);
      await refused({ ...base(), name: 'mine' }, 409, 'conflict', /the name 'mine' is taken by a stored model/);
      await refused({ name: 'other', deployments: [{ id: 'mine', provider: 'openai-compatible', base_url: up.url }] }, 409, 'conflict', /deployment id 'mine'/);
      assert.equal((await call('DELETE', '/models/mine')).statusCode, 200);
    });

    test('read-only: every change to a file or built-in model is 409 read_only, in both languages', async () => {
      for (const name of ['filemodel', 'tts-1']) {
        for (const [method, url, payload] of [
          ['PUT', `/models/${name}`, { entry: { ...base(), name } }],
          ['DELETE', `/models/${name}`, undefined],
          ['POST', `/models/${name}/disable`, undefined],
          ['POST', `/models/${name}/enable`, undefined],
        ] as const) {
          const res = await call(method, url, payload);
          assert.equal(res.statusCode, 409, `${method} ${url}: ${res.body}`);
          assert.equal(res.json().meta.error, 'read_only');
          assert.equal(res.json().meta.code, 40904);
          assert.match(res.json().meta.message, name === 'filemodel' ? /'filemodel' is a model of the model file and is read-only here: change it in the model file/ : /built-in/);
        }
      }
      const zh = await call('DELETE', '/models/filemodel', undefined, 'zh');
      assert.match(zh.json().meta.message, /模型 'filemodel' 是模型文件中的模型，在此处为只读/);
      // the file model still serves as it was
      const listed = ((await call('GET', '/models')).json().data.list as any[]).find((m) => m.name === 'filemodel');
      assert.equal(listed.source, 'file');
      assert.equal(listed.enabled, true);
    });

    test('unknown names: 404; a rename: 400; a body without entry or with a non-object: 400', async () => {
      for (const [method, url, payload] of [
        ['PUT', '/models/nope', { entry: { ...base(), name: 'nope' } }],
        ['DELETE', '/models/nope', undefined],
        ['POST', '/models/nope/disable', undefined],
        ['POST', '/models/nope/test', {}],
      ] as const) {
        const res = await call(method, url, payload);
        assert.equal(res.statusCode, 404, `${method} ${url}: ${res.body}`);
        assert.equal(res.json().meta.error, 'model_not_found');
        assert.match(res.json().meta.message, /no model is named 'nope'/);
      }
      assert.equal((await call('POST', '/models', { entry: { ...base(), name: 'kept' } })).statusCode, 201);
      const renamed = await call('PUT', '/models/kept', { entry: { ...base(), name: 'other' } });
      assert.equal(renamed.statusCode, 400, renamed.body);
      assert.match(renamed.json().meta.message, /a model is not renamed/);
      // an edit the checker refuses changes nothing
      const bad = await call('PUT', '/models/kept', { entry: { ...base(), name: 'kept', base_url: 'ftp://x' } });
      assert.equal(bad.statusCode, 400);
      assert.equal(JSON.parse((await t.core.db.db.selectFrom('stored_models').select('entry').where('name', '=', 'kept').executeTakeFirstOrThrow()).entry).base_url, up.url);
      const unknownDep = await call('POST', '/models/kept/test', { deployment: 'nope' });
      assert.equal(unknownDep.statusCode, 400, unknownDep.body);
      assert.match(unknownDep.json().meta.message, /has no deployment 'nope'; its deployments: kept/);
      assert.equal((await call('DELETE', '/models/kept')).statusCode, 200);
      for (const payload of [{}, { entry: 'x' }, { entry: [] }, { entry: {}, extra: 1 }]) {
        const res = await call('POST', '/models', payload);
        assert.equal(res.statusCode, 400, `${JSON.stringify(payload)}: ${res.body}`);
      }
    });
  });
}
