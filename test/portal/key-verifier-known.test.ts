// The key verifier's set of existing keys (issue 22, §2), against a key store in memory: what a throttled address
// may still use, and what the reads of the newest keys cost and find.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KeyVerifier, FAILED_LIMIT } from '../../src/portal/keys/verifier.js';
import { generateApiKey, keyDigest } from '../../src/platform/auth/api-key-format.js';
import type { KeyStore } from '../../src/portal/keys/store.js';
import { verifiedKeyRow } from './util.js';

const pepper = Buffer.alloc(32, 9);

/** keys by digest with their seq; `newest` counts the reads of the newest keys, `reads` the reads of one key */
function memoryStore() {
  const rows = new Map<string, { seq: number; userId: string }>();
  const s = { reads: 0, newest: 0 };
  const store = {
    findByDigest: async (d: string) => {
      s.reads++;
      const r = rows.get(d);
      return r ? verifiedKeyRow({ user_id: r.userId }) : undefined;
    },
    touchLastUsed: async () => {},
    knownDigests: async (limit: number) =>
      [...rows]
        .map(([digest, r]) => ({ digest, seq: r.seq }))
        .sort((a, b) => b.seq - a.seq)
        .slice(0, limit),
    digestsAfter: async (seq: number, limit: number) => {
      s.newest++;
      return [...rows]
        .map(([digest, r]) => ({ digest, seq: r.seq }))
        .filter((r) => r.seq > seq)
        .sort((a, b) => a.seq - b.seq)
        .slice(0, limit);
    },
  } as unknown as KeyStore;
  /** a key committed now (made elsewhere: nobody tells the verifier) */
  const add = (seq: number, userId: string) => {
    const key = generateApiKey('inference');
    rows.set(keyDigest(pepper, key), { seq, userId });
    return key;
  };
  return { store, s, add };
}

async function throttle(v: KeyVerifier, source: string) {
  for (let i = 0; i < FAILED_LIMIT; i++) await assert.rejects(v.verify(generateApiKey('inference'), 'inference', source), { code: 'invalid_api_key' });
  await assert.rejects(v.verify(generateApiKey('inference'), 'inference', source), { code: 'rate_limit_exceeded' });
}

describe('the set of existing keys', () => {
  test('several instances: a key made elsewhere is found by one read of the newest keys, shared and spaced', async () => {
    const m = memoryStore();
    const old = m.add(10, 'old');
    const v = new KeyVerifier(m.store, pepper, 0, 60_000, 100, false);
    assert.deepEqual(await v.loadKnown(), { keys: 1, complete: true });
    await throttle(v, 'a');
    // a key loaded at start: read, never throttled, and no read of the newest keys
    const before = m.s.newest;
    assert.equal((await v.verify(old, 'inference', 'a')).userId, 'old');
    assert.equal(m.s.newest, before);
    // made elsewhere with no notice: found by the next read of the newest keys
    const made = m.add(12, 'made');
    assert.equal((await v.verify(made, 'inference', 'a')).userId, 'made');
    // a key whose seq is lower but whose commit came later (seq 11 after 12 was seen) is still found
    const late = m.add(11, 'late');
    assert.equal((await v.verify(late, 'inference', 'a')).userId, 'late');
    // forty forged keys at once from the throttled address: refused after one shared read, no read of their own
    const reads = m.s.reads;
    const newest = m.s.newest;
    const results = await Promise.allSettled(Array.from({ length: 40 }, () => v.verify(generateApiKey('inference'), 'inference', 'a')));
    assert.deepEqual(new Set(results.map((r) => (r.status === 'rejected' ? (r.reason as { code: string }).code : 'ok'))), new Set(['rate_limit_exceeded']));
    assert.equal(m.s.reads, reads);
    assert.ok(m.s.newest - newest <= 1, `${m.s.newest - newest} reads of the newest keys for 40 requests`);
    // a key made here is known at once, without any read of the newest keys
    const here = m.add(13, 'here');
    v.noteCreated(keyDigest(pepper, here));
    const n = m.s.newest;
    assert.equal((await v.verify(here, 'inference', 'a')).userId, 'here');
    assert.equal(m.s.newest, n);
  });

  test('one process makes every key (PGlite): a throttled unknown key is refused without any read', async () => {
    const m = memoryStore();
    const v = new KeyVerifier(m.store, pepper, 0, 60_000, 100, true);
    await v.loadKnown();
    await throttle(v, 'b');
    const reads = m.s.reads;
    for (let i = 0; i < 50; i++) await assert.rejects(v.verify(generateApiKey('inference'), 'inference', 'b'), { code: 'rate_limit_exceeded' });
    assert.equal(m.s.reads, reads);
    assert.equal(m.s.newest, 0);
    const made = m.add(1, 'made-here');
    v.noteCreated(keyDigest(pepper, made));
    assert.equal((await v.verify(made, 'inference', 'b')).userId, 'made-here');
  });

  test('a verifier whose set was never loaded throttles unknown keys as before, but never a cached one', async () => {
    const m = memoryStore();
    const known = m.add(1, 'cached');
    const v = new KeyVerifier(m.store, pepper, 0, 60_000, 100, false);
    assert.equal((await v.verify(known, 'inference', 'c')).userId, 'cached');
    await throttle(v, 'c');
    // its entry is stale (freshMs 0): read again, not throttled
    assert.equal((await v.verify(known, 'inference', 'c')).userId, 'cached');
    assert.equal(m.s.newest, 0);
  });
});
