import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KeyVerifier } from '../../src/portal/keys/verifier.js';
import { generateApiKey, keyDigest } from '../../src/platform/auth/api-key-format.js';
import type { VerifiedKeyRow as KeyRow, KeyStore } from '../../src/portal/keys/store.js';
import { verifiedKeyRow } from './util.js';

const pepper = Buffer.alloc(32, 9);

const rowOf = (id: string): KeyRow => verifiedKeyRow({ id, user_id: `user_of_${id}` });

/** A key store that knows keys by their stored digest, as the database does, and counts the reads of each digest. */
function storeOf(keys: Map<string, KeyRow>) {
  const reads: string[] = [];
  const store = {
    findByDigest: async (digest: string) => {
      reads.push(digest);
      return keys.get(digest);
    },
    touchLastUsed: async () => {},
  } as unknown as KeyStore;
  return { store, reads };
}

describe('key verification: the digest of a key is computed once and found again by the key', () => {
  test('each key is looked up by its own HMAC digest, on its first request and on every later one', async () => {
    const a = generateApiKey('inference');
    const b = generateApiKey('inference');
    const keys = new Map([
      [keyDigest(pepper, a), rowOf('key_a')],
      [keyDigest(pepper, b), rowOf('key_b')],
    ]);
    const s = storeOf(keys);
    // freshMs 0: every request reads the database again, so each read shows the digest the request was found by
    const v = new KeyVerifier(s.store, pepper, 0, 60_000);
    for (let i = 0; i < 3; i++) {
      assert.equal((await v.verify(a, 'inference')).keyId, 'key_a');
      assert.equal((await v.verify(b, 'inference')).keyId, 'key_b');
    }
    assert.deepEqual(
      s.reads,
      [0, 1, 2].flatMap(() => [keyDigest(pepper, a), keyDigest(pepper, b)]),
    );
  });

  test('a key the database does not know is not taken for one verified before it', async () => {
    const a = generateApiKey('inference');
    const unknown = generateApiKey('inference');
    const s = storeOf(new Map([[keyDigest(pepper, a), rowOf('key_a')]]));
    const v = new KeyVerifier(s.store, pepper, 60_000, 60_000);
    await v.verify(a, 'inference');
    await assert.rejects(v.verify(unknown, 'inference'), (e: Error & { code?: string }) => e.code === 'invalid_api_key');
    assert.deepEqual(s.reads, [keyDigest(pepper, a), keyDigest(pepper, unknown)]);
    // and the known key still passes, from its cache entry (no third read)
    assert.equal((await v.verify(a, 'inference')).keyId, 'key_a');
    assert.equal(s.reads.length, 2);
  });

  test('a change dropped by digest still takes effect, and the memo stays within the cache bound', async () => {
    const tokens = Array.from({ length: 5 }, () => generateApiKey('inference'));
    const keys = new Map(tokens.map((t, i) => [keyDigest(pepper, t), rowOf(`key_${i}`)]));
    const s = storeOf(keys);
    // at most 2 entries: the 5 keys push each other out of the cache and out of the digest memo
    const v = new KeyVerifier(s.store, pepper, 60_000, 60_000, 2);
    for (const t of tokens) await v.verify(t, 'inference');
    for (const t of tokens) await v.verify(t, 'inference');
    const memo = (v as unknown as { digests: Map<string, string> }).digests;
    assert.ok(memo.size <= 2, `the memo holds ${memo.size} digests`);
    // the memo holds no key: only digests, under a hash of the key
    for (const [k, d] of memo) {
      assert.ok(!tokens.includes(k) && !tokens.some((t) => k.includes(t.slice(3))), 'a key is kept in memory');
      assert.ok(keys.has(d));
    }
    // revoked in the database, dropped by digest (what the change feed sends): refused on the next request
    const last = tokens.at(-1)!;
    keys.set(keyDigest(pepper, last), { ...rowOf('key_4'), status: 'revoked' } as KeyRow);
    v.invalidateDigest(keyDigest(pepper, last));
    await assert.rejects(v.verify(last, 'inference'), (e: Error & { code?: string }) => e.code === 'api_key_revoked');
  });
});
