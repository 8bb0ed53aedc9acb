import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KeyVerifier } from '../../src/portal/keys/verifier.js';
import { generateApiKey } from '../../src/platform/auth/api-key-format.js';
import type { VerifiedKeyRow as KeyRow, KeyStore } from '../../src/portal/keys/store.js';
import { verifiedKeyRow } from './util.js';

const pepper = Buffer.alloc(32, 7);

/** A key store whose reads wait until the test lets them answer (a database that is busy or away). */
function gatedStore(row: () => KeyRow | undefined) {
  let reads = 0;
  const gates: Array<() => void> = [];
  const store = {
    findByDigest: async () => {
      reads++;
      await new Promise<void>((r) => gates.push(r));
      return row();
    },
    touchLastUsed: async () => {},
  } as unknown as KeyStore;
  return { store, reads: () => reads, open: () => gates.splice(0).forEach((g) => g()) };
}

const baseRow = verifiedKeyRow;

const tick = () => new Promise((r) => setImmediate(r));

describe('key verification with stale entries served (the embedded database, one process)', () => {
  test('a known key whose entry is stale is verified without waiting for the database, and read again behind it', async () => {
    let current = baseRow();
    const s = gatedStore(() => current);
    const v = new KeyVerifier(s.store, pepper, 0, 60_000, 100, true);
    const token = generateApiKey('inference');
    const first = v.verify(token, 'inference');
    await tick();
    s.open(); // the first sight of a key reads it, as before
    assert.equal((await first).userId, 'u1');
    // stale at once (freshMs 0): the answer comes from the entry while the database has not answered. The gate
    // stays shut, so a verification that waited for the read would never end: any answer proves it, the timeout
    // only bounds the failure (not a guess at how fast the answer comes)
    const second = await Promise.race([v.verify(token, 'inference'), new Promise((r) => setTimeout(() => r('waited'), 10_000).unref())]);
    assert.notEqual(second, 'waited', 'the request waited for the database');
    assert.equal(s.reads(), 2);
    // one background read per key at a time
    await v.verify(token, 'inference');
    assert.equal(s.reads(), 2);
    // the background read brings the change in for the next request
    current = baseRow({ status: 'disabled' as KeyRow['status'] });
    s.open();
    await tick();
    await tick();
    await assert.rejects(v.verify(token, 'inference'), (e: Error & { code?: string }) => /disabled/.test(e.message) || e.code === 'api_key_disabled');
  });

  test('a change made in this process still takes effect on the very next request', async () => {
    const s = gatedStore(() => baseRow());
    const v = new KeyVerifier(s.store, pepper, 0, 60_000, 100, true);
    const token = generateApiKey('inference');
    const first = v.verify(token, 'inference');
    await tick();
    s.open();
    await first;
    const { keyDigest } = await import('../../src/platform/auth/api-key-format.js');
    v.invalidateDigest(keyDigest(pepper, token));
    // the entry is gone: the next request reads the key again and waits for it
    const next = v.verify(token, 'inference');
    // a short pause proving a negative: no answer while the database has not answered (it never does before s.open())
    const raced = await Promise.race([next.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 200))]);
    assert.equal(raced, 'waiting');
    s.open();
    await next;
  });

  test('without serveStale (PostgreSQL, several processes) a stale entry is read again before the request goes on', async () => {
    const s = gatedStore(() => baseRow());
    const v = new KeyVerifier(s.store, pepper, 0, 60_000, 100, false);
    const token = generateApiKey('inference');
    const first = v.verify(token, 'inference');
    await tick();
    s.open();
    await first;
    const second = v.verify(token, 'inference');
    // a short pause proving a negative: no answer while the database has not answered (it never does before s.open())
    const raced = await Promise.race([second.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 200))]);
    assert.equal(raced, 'waiting');
    s.open();
    await second;
  });
});
