// Secrets operators type in (a stored model's api_key) are sealed with AES-256-GCM under PORTICO_SECRETS_KEY (or
// the key pepper when it is unset): they open only under that key and in the place they were sealed for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SecretBox, SecretError } from '../../src/platform/secrets.js';
import { loadConfig } from '../../src/platform/config.js';

const KEY = Buffer.from('a-secrets-key-0123456789abcdef0123456789');

test('sealed: not the clear text, different each time, opened with the same key and context', () => {
  const box = new SecretBox(KEY);
  const a = box.seal('sk-clear-value', 'model:m\u0000api_key');
  const b = box.seal('sk-clear-value', 'model:m\u0000api_key');
  assert.ok(!a.includes('sk-clear-value'));
  assert.notEqual(a, b, 'a random IV per value');
  assert.equal(box.open(a, 'model:m\u0000api_key'), 'sk-clear-value');
  assert.equal(new SecretBox(Buffer.from(KEY)).open(b, 'model:m\u0000api_key'), 'sk-clear-value', 'another process with the same key');
});

test('another key: refused as such; another place or an altered value: refused as corrupt', () => {
  const sealed = new SecretBox(KEY).seal('sk-1', 'model:m\u0000api_key');
  const other = new SecretBox(Buffer.from('another-secrets-key-0123456789abcdef01234'));
  assert.throws(
    () => other.open(sealed, 'model:m\u0000api_key'),
    (e) => e instanceof SecretError && e.reason === 'wrong_key' && /another PORTICO_SECRETS_KEY/.test(e.message),
  );
  const box = new SecretBox(KEY);
  assert.throws(
    () => box.open(sealed, 'model:other\u0000api_key'),
    (e) => e instanceof SecretError && e.reason === 'corrupt',
  );
  const parts = sealed.split('.');
  const body = Buffer.from(parts[3]!, 'base64url');
  body[0] = body[0]! ^ 1;
  assert.throws(
    () => box.open([...parts.slice(0, 3), body.toString('base64url')].join('.'), 'model:m\u0000api_key'),
    (e) => e instanceof SecretError && e.reason === 'corrupt',
  );
  assert.throws(
    () => box.open('not sealed', 'x'),
    (e) => e instanceof SecretError && e.reason === 'corrupt',
  );
});

test('the key: PORTICO_SECRETS_KEY when set, else the key pepper', () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-secrets-'));
  try {
    const base = { DATA_DIR: dir, JWT_SECRET: 'jwt-secret-0123456789abcdef0123456789abcd', KEY_PEPPER: 'pepper-0123456789abcdef0123456789abcdef' };
    const withKey = loadConfig({ ...base, PORTICO_SECRETS_KEY: KEY.toString() });
    assert.equal(withKey.secretsKey.fromEnv, true);
    assert.equal(withKey.secretsKey.material.toString(), KEY.toString());
    const fromPepper = loadConfig(base);
    assert.equal(fromPepper.secretsKey.fromEnv, false);
    assert.deepEqual(fromPepper.secretsKey.material, fromPepper.keyPepper);
    assert.notEqual(new SecretBox(withKey.secretsKey.material).fingerprint, new SecretBox(fromPepper.secretsKey.material).fingerprint);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
