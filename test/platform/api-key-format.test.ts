import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { displayOf, displayParts, generateApiKey, keyDigest, looksLikeApiKey, parseApiKey } from '../../src/platform/auth/api-key-format.js';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

describe('API key format', () => {
  test('generated keys have the right shape, parse to their kind, and are unique', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const sk = generateApiKey('inference');
      const mk = generateApiKey('management');
      assert.match(sk, /^sk-[0-9A-Za-z]{38}$/);
      assert.match(mk, /^mk-[0-9A-Za-z]{38}$/);
      assert.equal(parseApiKey(sk), 'inference');
      assert.equal(parseApiKey(mk), 'management');
      seen.add(sk).add(mk);
      // the random part alone is unique too
      seen.add(sk.slice(3, 35));
    }
    assert.equal(seen.size, 6000);
  });

  test('the random body uses the whole alphabet (no bias toward a few characters)', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) for (const c of generateApiKey('inference').slice(3, 35)) counts.set(c, (counts.get(c) ?? 0) + 1);
    assert.equal(counts.size, 62);
    const expected = (2000 * 32) / 62;
    for (const [c, n] of counts) assert.ok(n > expected * 0.75 && n < expected * 1.25, `character ${c} appears ${n} times, expected about ${expected}`);
  });

  test('the checksum catches every single-character change of a real key', () => {
    for (const key of [generateApiKey('inference'), generateApiKey('management')]) {
      let tried = 0;
      for (let i = 0; i < key.length; i++) {
        const pool = i < 3 ? 'skmpSKM_-.x' : ALPHABET;
        for (const c of pool) {
          if (c === key[i]) continue;
          const changed = key.slice(0, i) + c + key.slice(i + 1);
          assert.equal(parseApiKey(changed), null, `accepted ${changed} (position ${i})`);
          tried++;
        }
      }
      assert.ok(tried > 38 * 61);
      // swapping two neighbouring different characters is caught too
      for (let i = 3; i < key.length - 1; i++) {
        if (key[i] === key[i + 1]) continue;
        const swapped = key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2);
        assert.equal(parseApiKey(swapped), null, `accepted a swap at ${i}`);
      }
      // dropping or adding a character
      for (let i = 0; i < key.length; i++) assert.equal(parseApiKey(key.slice(0, i) + key.slice(i + 1)), null);
      assert.equal(parseApiKey(key + 'a'), null);
      assert.equal(parseApiKey(' ' + key), null);
      assert.equal(parseApiKey(key.toUpperCase()), null);
    }
  });

  test('random text and look-alikes are refused', () => {
    for (const s of ['', 'sk-', 'mk-', 'sk-abc', 'x'.repeat(41), 'sk-' + '0'.repeat(38), 'Bearer sk-x', 'sk-' + 'é'.repeat(38)]) {
      assert.equal(parseApiKey(s), null, s);
    }
  });

  test('display parts: the prefix and 4 characters, an ellipsis, the last 4', () => {
    const key = generateApiKey('inference');
    const { prefix, suffix } = displayParts(key);
    assert.equal(prefix, key.slice(0, 7));
    assert.equal(suffix, key.slice(-4));
    assert.equal(displayOf(prefix, suffix), `${key.slice(0, 7)}...${key.slice(-4)}`);
    // the masked form reveals at most 8 of the 38 random/checksum characters
    assert.ok(prefix.length - 3 + suffix.length <= 8);
  });

  test('digests: HMAC-SHA256 hex, depend on the pepper, deterministic', () => {
    const key = generateApiKey('inference');
    const p1 = Buffer.alloc(32, 1);
    const p2 = Buffer.alloc(32, 2);
    assert.match(keyDigest(p1, key), /^[0-9a-f]{64}$/);
    assert.equal(keyDigest(p1, key), keyDigest(p1, key));
    assert.notEqual(keyDigest(p1, key), keyDigest(p2, key));
    assert.ok(!keyDigest(p1, key).includes(key));
  });

  test('looksLikeApiKey tells keys from JWTs by prefix', () => {
    assert.equal(looksLikeApiKey(generateApiKey('inference')), true);
    assert.equal(looksLikeApiKey('mk-anything'), true);
    assert.equal(looksLikeApiKey('eyJhbGciOiJIUzI1NiJ9.e30.x'), false);
  });
});
