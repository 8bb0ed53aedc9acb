/**
 * An `auth: entra` deployment of the azure-openai provider served by Portico, driven with the official `openai` SDK
 * through /v1/chat/completions and /v1/embeddings, against a mock Entra token endpoint and the Azure OpenAI mock:
 * nothing is fetched at start; the first request fetches the token the model file's credential names; a token
 * endpoint that fails is an OpenAI-shaped 502 saying the credential could not be obtained, and the next request
 * works; the client secret and the tokens are never in an answer or a log line (trace level).
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import OpenAI from 'openai';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAzureMock, type AzureMock } from '../helpers/azure-mock.js';
import { startEntraMock, type EntraMock } from '../helpers/entra-mock.js';
import { parseModelConfig } from '../../src/models/config.js';
import { quietFor } from '../helpers/wait.js';

const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const CLIENT = '5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9';
const SECRET = 'Qw3~app.entra-secret_9876543210';
process.env.ENTRA_APP_TEST_SECRET = SECRET;

describe('azure-openai with auth: entra through /v1', () => {
  let idp: EntraMock;
  let az: AzureMock;
  let t: TestApp & { url?: string };
  let client: OpenAI;
  let key: string;
  const log: string[] = [];

  before(async () => {
    idp = await startEntraMock({ tenant: TENANT, clientId: CLIENT, clientSecret: SECRET });
    az = await startAzureMock({ adToken: (tok) => idp.issued.includes(tok) });
    const cred = `auth: entra, tenant_id: ${TENANT}, client_id: ${CLIENT}, client_secret_env: ENTRA_APP_TEST_SECRET, authority_host: ${idp.url}`;
    const yaml = `
models:
  - { name: gpt-4o, provider: azure-openai, endpoint: ${az.url}, deployment: gpt4o-prod, ${cred}, retries: 0 }
  - { name: text-embedding-3-small, type: embeddings, provider: azure-openai, endpoint: ${az.url}, surface: v1, ${cred} }
`;
    const sink = new Writable({ write: (chunk, _e, cb) => (log.push(chunk.toString()), cb()) });
    t = await buildTestApp({ listen: true, models: parseModelConfig(yaml).models, logDestination: sink, env: { LOG_LEVEL: 'trace' } });
    key = await t.inferenceKey('alice');
    client = new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0 });
  });
  after(async () => {
    await t.close();
    await az.close();
    await idp.close();
  });

  test('nothing is fetched at start; the first request fetches the token, the next ones and the embeddings reuse it', async () => {
    // a fetch at start would have reached the mock by now (proves a negative)
    await quietFor(200);
    assert.equal(idp.requests.length, 0);
    const r = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.choices[0]!.message.content, 'Hello from Azure.');
    const s = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true });
    let streamed = '';
    for await (const c of s) streamed += c.choices[0]?.delta?.content ?? '';
    assert.equal(streamed, 'Hello from Azure.');
    const emb = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['ab'] });
    assert.deepEqual(Array.from(emb.data[0]!.embedding), [2, 0, 0.5]);
    assert.equal(idp.requests.length, 1);
    assert.deepEqual([idp.requests[0]!.tenant, idp.requests[0]!.form.get('client_id')], [TENANT, CLIENT]);
    assert.deepEqual(
      az.requests.map((q) => [q.path, q.headers.authorization]),
      [
        ['/openai/deployments/gpt4o-prod/chat/completions', `Bearer ${idp.issued[0]}`],
        ['/openai/deployments/gpt4o-prod/chat/completions', `Bearer ${idp.issued[0]}`],
        ['/openai/v1/embeddings', `Bearer ${idp.issued[0]}`],
      ],
    );
  });

  test('a token endpoint that fails: an OpenAI-shaped 502 that says the credential could not be obtained, without the secret; the next request works', async () => {
    // the held token is refused by Azure from now on: the next request must fetch a new one
    const held = idp.issued.at(-1)!;
    idp.issued.length = 0;
    az.reset();
    idp.reset();
    idp.script({ status: 401, error: 'invalid_client', description: `Invalid client secret provided (${SECRET}).` });
    const res = await fetch(t.url + '/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const body = await res.text();
    assert.equal(res.status, 502);
    const e = (JSON.parse(body) as { error: { message: string; type: string; code: string; param: unknown } }).error;
    // (the engine's upstream_auth_failed is the error table's engine_error at the API)
    assert.deepEqual([e.code, e.type], ['engine_error', 'server_error']);
    assert.match(e.message, /could not obtain an Entra ID token for Azure OpenAI: the token endpoint refused the client credentials \(HTTP 401, invalid_client, AADSTS7000215\)/);
    assert.doesNotMatch(body, /Qw3~|entra-secret/);
    assert.doesNotMatch(body, new RegExp(held));
    // one 401 from Azure (the old token), one refetch that fails: nothing else
    assert.deepEqual([az.requests.length, idp.requests.length], [1, 1]);

    const ok = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'again' }] });
    assert.equal(ok.choices[0]!.message.content, 'Hello from Azure.');
    assert.equal(idp.requests.length, 2);
    assert.equal(az.requests.at(-1)!.headers.authorization, `Bearer ${idp.issued.at(-1)}`);
    // never in a log line: the secret (raw or form-encoded) nor a token
    assert.ok(log.length > 0, 'the log was captured');
    const leaks = log.filter((l) => l.includes(SECRET) || l.includes(encodeURIComponent(SECRET)) || l.includes(held) || idp.issued.some((tok) => l.includes(tok)));
    assert.deepEqual(leaks, []);
  });
});
