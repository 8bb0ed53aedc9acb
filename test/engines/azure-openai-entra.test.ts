/**
 * The azure-openai provider's `auth: entra` (an Entra ID app's client credentials) against a mock Entra token endpoint
 * (test/helpers/entra-mock.ts) and the Azure OpenAI mock (test/helpers/azure-mock.ts, which takes only the tokens the
 * Entra mock issued and the test has not revoked): the token call (its URL, form and scope), fetched on first use
 * and never when the engine is made, one fetch shared by concurrent requests (and by the text and embeddings engines
 * of one credential), a refresh before the token expires, a 401 from Azure answered by one new token and one retry,
 * the token endpoint's failures (a refusal, a 5xx, garbage, a reset, a hang, a refused connection) as clear retryable
 * 502/504s that do not stick, the lifetime rules on a test clock, the model-file checks, and the client secret and
 * the tokens never in an error.
 */
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { azureOpenAI } from '../../src/engines/azure-openai/provider.js';
import { EntraCredential, REFRESH_RETRY_MS } from '../../src/engines/azure-openai/entra.js';
import { EngineError, type EmbeddingsEngine, type GenerateRequest, type TextEngine } from '../../src/engines/types.js';
import { withStoredSecret, type ProviderContext } from '../../src/engines/provider.js';
import { parseModelConfig, ModelConfigError } from '../../src/models/config.js';
import { startAzureMock, type AzureMock, type AzureRequest } from '../helpers/azure-mock.js';
import { startEntraMock, type EntraMock } from '../helpers/entra-mock.js';
import { collect, failure, text } from '../helpers/engine-events.js';
import { quietFor, waitFor } from '../helpers/wait.js';

const TENANT = 'contoso.onmicrosoft.com';
const CLIENT = '0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
const SECRET = 'Xy8Q~entra.client-secret_0123456789';
const SCOPE = 'https://cognitiveservices.azure.com/.default';

let idp: EntraMock;
let az: AzureMock;
/** tokens Azure no longer takes (revoked, or expired early) */
const revoked = new Set<string>();
let refuseAll = false;

before(async () => {
  idp = await startEntraMock({ tenant: TENANT, clientId: CLIENT, clientSecret: SECRET });
  az = await startAzureMock({ adToken: (t) => !refuseAll && idp.issued.includes(t) && !revoked.has(t) });
});
after(async () => {
  await az.close();
  await idp.close();
});
beforeEach(() => {
  az.reset();
  idp.reset();
  refuseAll = false;
});

const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], ...over });
const bearer = (r: AzureRequest | undefined) => r?.headers.authorization?.replace(/^Bearer /, '');

function ctx(env: Record<string, string | undefined>): ProviderContext {
  return { env, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };
}

/** the Azure SDK's environment variables, pointing at the mock */
const sdkEnv = () => ({ AZURE_TENANT_ID: TENANT, AZURE_CLIENT_ID: CLIENT, AZURE_CLIENT_SECRET: SECRET, AZURE_AUTHORITY_HOST: idp.url });

/** a text engine of `auth: entra` (the credential from the Azure SDK's variables unless `over` names it) */
function entraText(over: Record<string, unknown> = {}, env: Record<string, string | undefined> = sdkEnv()): Promise<TextEngine> {
  return azureOpenAI.create.text!({ name: 'gpt-4o', type: 'text', endpoint: az.url, deployment: 'gpt4o-prod', auth: 'entra', ...over } as never, ctx(env));
}

// ------------------------------------------------------------------ the token and its cache

test('first use fetches (nothing when the engine is made): the v2.0 token URL, the client credentials form, the Cognitive Services scope; the token as the bearer, no api-key', async () => {
  const e = await entraText({}, { ...sdkEnv(), AZURE_OPENAI_API_KEY: 'a-key-that-must-not-be-used' });
  // a fetch at creation would have reached the mock by now (proves a negative: nothing is called before a request)
  await quietFor(100);
  assert.equal(idp.requests.length, 0);
  assert.equal(text(await collect(e.generate(req()))), 'Hello from Azure.');
  assert.equal(idp.requests.length, 1);
  const t = idp.requests[0]!;
  assert.deepEqual([t.method, t.path, t.headers['content-type']], ['POST', `/${TENANT}/oauth2/v2.0/token`, 'application/x-www-form-urlencoded']);
  assert.deepEqual(Object.fromEntries(t.form), { grant_type: 'client_credentials', client_id: CLIENT, client_secret: SECRET, scope: SCOPE });
  const a = az.requests[0]!;
  assert.deepEqual([a.path, a.headers.authorization, a.headers['api-key']], ['/openai/deployments/gpt4o-prod/chat/completions', `Bearer ${idp.issued[0]}`, undefined]);
  // the next requests (streamed or not) reuse it
  await collect(e.generate(req({ stream: false })));
  await collect(e.generate(req()));
  assert.equal(idp.requests.length, 1);
  assert.deepEqual(az.requests.map(bearer), [idp.issued[0], idp.issued[0], idp.issued[0]]);
  await e.close();
});

test('one token per credential: concurrent requests share one fetch in flight, and so do the text and embeddings engines of the credential', async () => {
  let release!: () => void;
  idp.script({ gate: new Promise<void>((r) => (release = r)) });
  const e = await entraText();
  const emb = (await azureOpenAI.create.embeddings!(
    { name: 'text-embedding-3-small', type: 'embeddings', endpoint: az.url, auth: 'entra' } as never,
    ctx(sdkEnv()),
  )) as EmbeddingsEngine;
  const all = Promise.all([...Array.from({ length: 5 }, () => collect(e.generate(req()))), emb.embed({ model: 'text-embedding-3-small', input: ['abc'] })]);
  await waitFor(() => idp.requests.length >= 1, { what: 'the token call' });
  // a second fetch, if a request made one, has time to reach the mock (proves a negative) before the first is answered
  await quietFor(100);
  release();
  const out = await all;
  assert.equal(idp.requests.length, 1, 'one token call for six requests');
  assert.equal(az.requests.length, 6);
  assert.ok(
    az.requests.every((r) => bearer(r) === idp.issued.at(-1)),
    'every request carries the one token',
  );
  assert.deepEqual((out[5] as { vectors: number[][] }).vectors, [[3, 0, 0.5]]);
  await Promise.all([e.close(), emb.close()]);
  // the credential was given back by both: a new engine fetches again
  const again = await entraText();
  await collect(again.generate(req()));
  assert.equal(idp.requests.length, 2);
  await again.close();
});

test('a request aborted while the token is fetched ends at once; the fetch goes on for the requests that wait on it', async () => {
  let release!: () => void;
  idp.script({ gate: new Promise<void>((r) => (release = r)) });
  const e = await entraText();
  const ctl = new AbortController();
  const aborted = failure(e.generate(req({ signal: ctl.signal })));
  const other = collect(e.generate(req()));
  await waitFor(() => idp.requests.length >= 1, { what: 'the token call' });
  ctl.abort();
  const { error } = await aborted;
  assert.equal(error.code, 'aborted');
  release();
  assert.equal(text(await other), 'Hello from Azure.');
  assert.deepEqual([idp.requests.length, az.requests.length, bearer(az.requests[0])], [1, 1, idp.issued.at(-1)]);
  await e.close();
});

test('expiry: a token is refreshed before it expires (expires_in minus a margin), by the next request after that', async () => {
  // the first token lives 1 s (due after half of it), the next one an hour
  idp.script({ expiresIn: 1 });
  const e = await entraText();
  await collect(e.generate(req()));
  const first = idp.issued.at(-1)!;
  assert.equal(bearer(az.requests[0]), first);
  await waitFor(
    async () => {
      await collect(e.generate(req()));
      return bearer(az.requests.at(-1)) !== first;
    },
    { what: 'a request with a refreshed token' },
  );
  const second = idp.issued.at(-1)!;
  assert.notEqual(second, first);
  assert.equal(idp.requests.length, 2);
  assert.equal(bearer(az.requests.at(-1)), second);
  // every request before the refresh sent the first token; the long-lived second one is kept
  assert.ok(az.requests.slice(0, -1).every((r) => bearer(r) === first));
  await collect(e.generate(req()));
  assert.deepEqual([idp.requests.length, bearer(az.requests.at(-1))], [2, second]);
  await e.close();
});

test('a 401 from Azure: the token is fetched again once (concurrent refusals share the fetch) and the request sent again; a second 401 fails it', async () => {
  const e = await entraText();
  await collect(e.generate(req()));
  const first = idp.issued.at(-1)!;
  revoked.add(first);
  const answers = await Promise.all([1, 2, 3].map(() => collect(e.generate(req()))));
  assert.deepEqual(
    answers.map((a) => text(a)),
    ['Hello from Azure.', 'Hello from Azure.', 'Hello from Azure.'],
  );
  const second = idp.issued.at(-1)!;
  assert.equal(idp.requests.length, 2, 'one new token for the three refusals');
  assert.deepEqual(az.requests.slice(1).map(bearer).sort(), [first, first, first, second, second, second].sort());
  // whole answers (stream false) are retried too
  revoked.add(second);
  const whole = await collect(e.generate(req({ stream: false })));
  assert.equal(text(whole), 'Hello from Azure.');
  assert.equal(idp.requests.length, 3);

  // Azure refuses every token (the app has no role on the resource): one new token, one retry, then a 502
  az.reset();
  idp.reset();
  refuseAll = true;
  const { error } = await failure(e.generate(req()));
  assert.deepEqual([error.status, error.code, error.retryable, error.upstreamStatus], [502, 'upstream_auth_failed', true, 401]);
  assert.match(error.message, /refused Portico's Entra ID token \(HTTP 401\).*Cognitive Services OpenAI User/);
  assert.deepEqual([idp.requests.length, az.requests.length], [1, 2]);
  assert.notEqual(bearer(az.requests[0]), bearer(az.requests[1]));
  // a 403 (no role) is not retried: a new token would not have the role either
  refuseAll = false;
  az.reset();
  idp.reset();
  az.script({ status: 403, errorMessage: 'The principal does not have access' });
  const denied = await failure(e.generate(req()));
  assert.deepEqual([denied.error.status, denied.error.code, az.requests.length, idp.requests.length], [502, 'upstream_auth_failed', 1, 0]);
  await e.close();
});

// ------------------------------------------------------------------ the token endpoint's failures

test('token endpoint failures are clear retryable errors that name the cause, never the secret, and do not stick: the next request fetches again', async () => {
  const cases: [Parameters<EntraMock['script']>[0], number, string, RegExp][] = [
    [
      { status: 400, error: 'invalid_client', aadsts: 7000215, description: `Invalid client secret provided: ${SECRET}` },
      502,
      'upstream_auth_failed',
      /refused the client credentials \(HTTP 400, invalid_client, AADSTS7000215\)/,
    ],
    [{ status: 401, error: 'invalid_client' }, 502, 'upstream_auth_failed', /refused the client credentials \(HTTP 401, invalid_client, AADSTS7000215\): check the tenant/],
    [{ status: 500, error: 'temporarily_unavailable', aadsts: 90033 }, 502, 'upstream_unavailable', /the token endpoint failed \(HTTP 500, temporarily_unavailable, AADSTS90033\)/],
    [{ raw: '<html>Service Unavailable</html>' }, 502, 'upstream_error', /answer is not JSON/],
    [{ raw: '{"token_type":"Bearer","expires_in":3599}' }, 502, 'upstream_error', /has no access_token and expires_in/],
    [{ raw: '{"token_type":"Bearer","access_token":"abc","expires_in":-5}' }, 502, 'upstream_error', /has no access_token and expires_in/],
    [{ reset: true }, 502, 'upstream_unavailable', /127\.0\.0\.1:\d+ unreachable/],
    [{ hang: true }, 504, 'upstream_timeout', /127\.0\.0\.1:\d+ did not answer within 500 ms/],
  ];
  for (const [reply, status, code, message] of cases) {
    az.reset();
    idp.reset();
    // (an engine of its own: its credential holds no token yet)
    const e = await entraText({ timeout_ms: 500 });
    idp.script(reply);
    for (const stream of [true, false]) {
      if (!stream) idp.script(reply);
      const { error } = await failure(e.generate(req({ stream })));
      const what = JSON.stringify(reply);
      assert.deepEqual([error.status, error.code, error.retryable], [status, code, true], what);
      assert.match(error.message, /^could not obtain an Entra ID token for Azure OpenAI: /, what);
      assert.match(error.message, message, what);
      assert.doesNotMatch(error.message, /client-secret|Xy8Q/, what);
    }
    assert.equal(az.requests.length, 0, 'nothing is sent to Azure without a token');
    // not poisoned: the next request fetches a token and is answered
    assert.equal(text(await collect(e.generate(req()))), 'Hello from Azure.');
    assert.equal(idp.requests.length, 3);
    await e.close();
  }
});

test('a token endpoint that refuses connections: a retryable 502 naming the host; a wrong secret: the 401 invalid_client of Entra', async () => {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const e = await entraText({}, { ...sdkEnv(), AZURE_AUTHORITY_HOST: `http://127.0.0.1:${port}` });
  const { error } = await failure(e.generate(req()));
  assert.deepEqual([error.status, error.code, error.retryable], [502, 'upstream_unavailable', true]);
  assert.match(error.message, new RegExp(`could not obtain an Entra ID token for Azure OpenAI: 127\\.0\\.0\\.1:${port} unreachable \\(ECONNREFUSED\\)`));
  await e.close();

  const wrong = await entraText({}, { ...sdkEnv(), AZURE_CLIENT_SECRET: 'not-the-secret-value' });
  const r = await failure(wrong.generate(req()));
  assert.deepEqual([r.error.status, r.error.code], [502, 'upstream_auth_failed']);
  assert.match(r.error.message, /HTTP 401, invalid_client, AADSTS7000215/);
  assert.doesNotMatch(r.error.message, /not-the-secret/);
  await wrong.close();
});

test('the secret and the tokens never leak: an Azure error that echoes either is redacted', async () => {
  const e = await entraText();
  await collect(e.generate(req()));
  const token = idp.issued.at(-1)!;
  az.script({ status: 400, errorMessage: `bad request with ${token} and ${SECRET}` }, { status: 500, errorMessage: `oops Bearer ${token}` });
  let { error } = await failure(e.generate(req()));
  assert.equal(error.message, 'bad request with *** and ***');
  ({ error } = await failure(e.generate(req())));
  assert.match(error.message, /oops Bearer \*\*\*/);
  await e.close();
});

// ------------------------------------------------------------------ the lifetime rules, on a test clock

test('lifetime rules (test clock): due at expires_in minus min(5 min, half); a failed refresh keeps the old token until it expires, retried after 10 s; expires_in as a string', async () => {
  let now = 1_000_000;
  const cred = new EntraCredential({ authorityHost: idp.url, tenantId: TENANT, clientId: CLIENT, clientSecret: SECRET, now: () => now });
  idp.script({ expiresIn: '3600' });
  const t1 = await cred.token();
  now += 3600_000 - 300_000 - 1;
  assert.equal(await cred.token(), t1, 'not due yet');
  assert.equal(idp.requests.length, 1);
  now += 2;
  // due: the refresh fails, the old token still serves
  idp.script({ status: 503, error: 'temporarily_unavailable' });
  assert.equal(await cred.token(), t1);
  assert.equal(idp.requests.length, 2);
  now += REFRESH_RETRY_MS - 1;
  assert.equal(await cred.token(), t1, 'no retry within 10 s of a failed refresh');
  assert.equal(idp.requests.length, 2);
  now += 2;
  const t2 = await cred.token();
  assert.notEqual(t2, t1);
  assert.equal(idp.requests.length, 3);
  // a short token: due after half its life; past 90 % of it, a failed refresh fails the request
  idp.script({ expiresIn: 60 });
  cred.refused(t2);
  const t3 = await cred.token();
  now += 30_001;
  idp.script({ status: 500 });
  assert.equal(await cred.token(), t3, 'due, but still valid');
  now += 24_000;
  idp.script({ status: 500 });
  await assert.rejects(cred.token(), (e: unknown) => e instanceof EngineError && e.code === 'upstream_unavailable');
  // refused() of an older token does not drop the current one
  const t4 = await cred.token();
  cred.refused(t3);
  assert.equal(await cred.token(), t4);
  assert.equal(cred.fetches, 7);
  cred.close();
});

// ------------------------------------------------------------------ the model file

test('model-file checks: auth: entra exclusive with the other credentials, its keys only with it, tenant and client id shapes, the variables it needs when serving', () => {
  const c = (o: Record<string, unknown>, env?: Record<string, string>) =>
    azureOpenAI.check!({ name: 'm', type: 'text', endpoint: 'https://r.openai.azure.com', ...o } as never, env);
  const env = { AZURE_TENANT_ID: TENANT, AZURE_CLIENT_ID: CLIENT, AZURE_CLIENT_SECRET: SECRET };
  assert.equal(c({ auth: 'entra' }, env), undefined);
  assert.equal(c({ auth: 'entra' }), undefined, 'without the environment (operator commands): the shapes only');
  assert.equal(
    c(
      { auth: 'entra', tenant_id: '72f988bf-86f1-41af-91ab-2d7cd011db47', client_id: CLIENT, client_secret_env: 'MY_SECRET', authority_host: 'https://login.microsoftonline.us' },
      { MY_SECRET: 's3cret' },
    ),
    undefined,
  );
  assert.equal(c({ auth: 'api_key', api_key_env: 'K' }, { K: 'k' }), undefined);
  assert.match(c({ auth: 'entra', api_key_env: 'K' }) ?? '', /auth: entra and 'api_key_env' are exclusive/);
  assert.match(c({ auth: 'entra', azure_ad_token_env: 'T' }) ?? '', /auth: entra and 'azure_ad_token_env' are exclusive/);
  assert.match(c({ auth: 'api_key', azure_ad_token_env: 'T' }) ?? '', /auth: api_key and 'azure_ad_token_env' contradict/);
  assert.match(c({ tenant_id: TENANT }) ?? '', /'tenant_id' is a key of auth: entra .*add auth: entra/);
  assert.match(c({ client_secret_env: 'S' }) ?? '', /'client_secret_env' is a key of auth: entra/);
  assert.match(c({ auth: 'entra', tenant_id: 'contoso/../x' }) ?? '', /'tenant_id' must be the directory's id \(a GUID\) or its domain/);
  assert.match(c({ auth: 'entra', client_id: 'my-app' }) ?? '', /'client_id' must be the app's application \(client\) id, a GUID/);
  assert.match(
    c({ auth: 'entra' }, { ...env, AZURE_CLIENT_ID: 'not a guid' }) ?? '',
    /AZURE_CLIENT_ID \(read for auth: entra without 'client_id'\) must be the app's application \(client\) id/,
  );
  assert.match(c({ auth: 'entra', client_secret_env: '$S' }) ?? '', /'client_secret_env' takes the variable's name without '\$'/);
  assert.match(c({ auth: 'entra', client_secret_env: SECRET }) ?? '', /'client_secret_env' must be the name of an environment variable .*not the secret itself/);
  assert.match(c({ auth: 'entra', authority_host: 'login.microsoftonline.com' }) ?? '', /'authority_host' must be an http:\/\/ or https:\/\/ URL/);
  assert.match(c({ auth: 'entra' }, { ...env, AZURE_AUTHORITY_HOST: 'https://login.example/?x=1' }) ?? '', /AZURE_AUTHORITY_HOST must not carry a query/);
  // serving: what it reads must be there
  assert.match(c({ auth: 'entra' }, { AZURE_CLIENT_ID: CLIENT, AZURE_CLIENT_SECRET: SECRET }) ?? '', /auth: entra needs the tenant: set 'tenant_id', or AZURE_TENANT_ID/);
  assert.match(c({ auth: 'entra' }, { AZURE_TENANT_ID: TENANT, AZURE_CLIENT_SECRET: SECRET }) ?? '', /needs the app's client id: set 'client_id', or AZURE_CLIENT_ID/);
  assert.match(
    c({ auth: 'entra' }, { AZURE_TENANT_ID: TENANT, AZURE_CLIENT_ID: CLIENT }) ?? '',
    /needs the app's client secret: set AZURE_CLIENT_SECRET .* or name another variable with 'client_secret_env'/,
  );
  assert.match(c({ auth: 'entra', client_secret_env: 'MINE' }, env) ?? '', /'client_secret_env' names MINE, which is not set/);
  assert.match(c({ auth: 'entra' }, { ...env, AZURE_CLIENT_SECRET: ' ' }) ?? '', /AZURE_CLIENT_SECRET is set but empty/);
  // no message repeats the secret
  for (const o of [
    { auth: 'entra', client_secret_env: SECRET },
    { auth: 'entra', client_secret_env: '$' + SECRET },
  ])
    assert.doesNotMatch(c(o) ?? '', /Xy8Q/);
});

test('start-up errors: the model file refuses an unknown auth and names the model; serving without the variables names what to set; a 503 from create says the same', async () => {
  const yaml = (extra: string) => `models:\n  - { name: gpt-4o, provider: azure-openai, endpoint: https://r.openai.azure.com, ${extra} }\n`;
  assert.throws(
    () => parseModelConfig(yaml('auth: oauth')),
    (e: unknown) => e instanceof ModelConfigError && /gpt-4o/.test(e.message) && /auth/.test(e.message),
  );
  assert.equal(
    parseModelConfig(yaml('auth: entra, tenant_id: contoso.onmicrosoft.com'), 'PORTICO_CONFIG', { env: { AZURE_CLIENT_ID: CLIENT, AZURE_CLIENT_SECRET: SECRET } }).models.length,
    1,
  );
  assert.throws(
    () => parseModelConfig(yaml('auth: entra'), 'PORTICO_CONFIG', { env: { AZURE_TENANT_ID: TENANT } }),
    (e: unknown) => e instanceof ModelConfigError && /gpt-4o/.test(e.message) && /auth: entra needs the app's client id/.test(e.message),
  );
  await assert.rejects(entraText({}, { AZURE_TENANT_ID: TENANT, AZURE_CLIENT_ID: CLIENT }), (e: unknown) => {
    assert.ok(e instanceof EngineError);
    assert.deepEqual([e.status, e.code], [503, 'engine_unavailable']);
    assert.match(e.message, /the azure-openai model 'gpt-4o' has no Entra ID credential: auth: entra needs the app's client secret/);
    return true;
  });
  // the model's own keys win over the Azure SDK's variables; a key stored through the admin API wins over both
  const own = await entraText(
    { tenant_id: TENANT, client_id: CLIENT, client_secret_env: 'MY_ENTRA_SECRET', authority_host: idp.url },
    {
      MY_ENTRA_SECRET: SECRET,
      AZURE_TENANT_ID: 'other.onmicrosoft.com',
      AZURE_CLIENT_ID: '00000000-0000-0000-0000-000000000000',
      AZURE_AUTHORITY_HOST: 'http://127.0.0.1:1',
    },
  );
  await collect(own.generate(req()));
  assert.deepEqual([idp.requests.length, idp.requests[0]!.tenant, bearer(az.requests[0])], [1, TENANT, idp.issued.at(-1)]);
  await own.close();
  const stored = await azureOpenAI.create.text!(
    withStoredSecret({ name: 'gpt-4o', type: 'text' as const, endpoint: az.url, auth: 'entra' as const }, { apiKey: 'stored-key', version: '1' }),
    ctx(sdkEnv()),
  );
  await failure(stored.generate(req()));
  assert.deepEqual([az.requests.at(-1)!.headers['api-key'], az.requests.at(-1)!.headers.authorization, idp.requests.length], ['stored-key', undefined, 1]);
  await stored.close();
});
