// Failed key checks (issue 9, §2): a flood of well-formed forged keys is not a flood of database reads. The same
// forged key is read once (remembered as missing); many different ones from one address are throttled after
// FAILED_LIMIT failures (429, retry-after, no read), while known keys and other addresses go on working.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { generateApiKey } from '../../src/platform/auth/api-key-format.js';
import { FAILED_LIMIT } from '../../src/portal/keys/verifier.js';

let t: TestApp;
let reads = 0;
let good: string;
before(async () => {
  t = await buildTestApp();
  good = await t.inferenceKey('alice');
  const store = t.core.keys.store;
  const find = store.findByDigest.bind(store);
  store.findByDigest = (d: string) => {
    reads++;
    return find(d);
  };
});
after(() => t.close());

const call = (key: string, remoteAddress = '127.0.0.1') => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` }, remoteAddress });

test('the same forged key, 100 times: one database read, 401 every time', async () => {
  const forged = generateApiKey('inference');
  reads = 0;
  for (let i = 0; i < 100; i++) assert.equal((await call(forged, '10.0.0.1')).statusCode, 401);
  assert.equal(reads, 1);
});

test(`different forged keys from one address: at most ${FAILED_LIMIT} reads, then 429 without reading; known keys and other addresses still pass`, async () => {
  // the good key is verified (and cached) before the flood
  assert.equal((await call(good, '10.0.0.2')).statusCode, 200);
  reads = 0;
  const statuses: number[] = [];
  for (let i = 0; i < 300; i++) statuses.push((await call(generateApiKey('inference'), '10.0.0.2')).statusCode);
  assert.ok(reads <= FAILED_LIMIT, `${reads} database reads for 300 forged keys`);
  assert.deepEqual([...new Set(statuses)].sort(), [401, 429]);
  const refused = await call(generateApiKey('inference'), '10.0.0.2');
  assert.equal(refused.statusCode, 429);
  assert.ok(Number(refused.headers['retry-after']) >= 1);
  assert.match(refused.json().error.message, /failed API key checks/);
  // the known key still works from the throttled address, and another address is not throttled
  assert.equal((await call(good, '10.0.0.2')).statusCode, 200);
  assert.equal((await call(generateApiKey('inference'), '10.0.0.3')).statusCode, 401);
  // a key created now is found at once (nothing negative is remembered for it)
  const fresh = await t.inferenceKey('bob');
  assert.equal((await call(fresh, '10.0.0.3')).statusCode, 200);
});
