/**
 * Client secrets (ek_...): what one is minted with is what it opens to, until it expires; a secret sealed under
 * another pepper, or altered, is not one of ours.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClientSecrets } from '../../src/portal/keys/client-secrets.js';
import { AppError } from '../../src/platform/errors.js';

const code = (c: string) => (e: unknown) => e instanceof AppError && e.code === c;

test('a client secret opens to its digest and payload until it expires, then says it expired', async () => {
  const cs = new ClientSecrets('pepper-one-0123456789abcdef');
  const now = Date.now();
  const { value, expiresAt } = await cs.mint('digest-1', { session: { model: 'gpt-realtime' } }, 600, now);
  assert.match(value, /^ek_/);
  assert.equal(expiresAt, Math.floor(now / 1000) + 600);
  assert.deepEqual(await cs.open(value, now), { digest: 'digest-1', payload: { session: { model: 'gpt-realtime' } }, expiresAt });
  assert.equal((await cs.open(value, expiresAt * 1000 - 1)).digest, 'digest-1', 'good up to its last millisecond');
  await assert.rejects(cs.open(value, expiresAt * 1000), code('client_secret_expired'));
  await assert.rejects(cs.open(value, expiresAt * 1000 + 3_600_000), code('client_secret_expired'));
});

test('a secret of another pepper, an altered one, or not one at all: invalid_api_key', async () => {
  const cs = new ClientSecrets('pepper-one-0123456789abcdef');
  const { value } = await new ClientSecrets('pepper-two-0123456789abcdef').mint('digest-1', {}, 600);
  await assert.rejects(cs.open(value), code('invalid_api_key'));
  const mine = (await cs.mint('digest-1', {}, 600)).value;
  const parts = mine.split('.');
  parts[3] = parts[3]!.slice(0, -2) + (parts[3]!.endsWith('AA') ? 'BB' : 'AA');
  await assert.rejects(cs.open(parts.join('.')), code('invalid_api_key'));
  await assert.rejects(cs.open('ek_not-a-jwe'), code('invalid_api_key'));
  await assert.rejects(cs.open('sk-whatever'), code('invalid_api_key'));
});
