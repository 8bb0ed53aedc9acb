import { createHmac } from 'node:crypto';
import type { Kysely } from 'kysely';
import { ConfigError } from '../config.js';
import type { Database } from './schema.js';

/**
 * Instances that share a database must share KEY_PEPPER: a key's digest is HMAC(pepper, key), so an instance with
 * another pepper refuses every key made elsewhere with 401. The first instance stores a keyed fingerprint of its
 * pepper (HMAC of a constant under the pepper: it tells peppers apart and reveals nothing of them) in `settings`;
 * every later start compares and refuses to start on a mismatch, naming the setting.
 */
export function pepperFingerprint(pepper: Buffer): string {
  return createHmac('sha256', pepper).update('portico/key-pepper-fingerprint/v1').digest('hex');
}

export const PEPPER_FINGERPRINT_SETTING = 'key_pepper_fingerprint';

export async function assertSamePepper(db: Kysely<Database>, pepper: Buffer, pepperFromEnv: boolean): Promise<void> {
  const mine = pepperFingerprint(pepper);
  await db
    .insertInto('settings')
    .values({ key: PEPPER_FINGERPRINT_SETTING, value: mine })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  const row = await db.selectFrom('settings').select('value').where('key', '=', PEPPER_FINGERPRINT_SETTING).executeTakeFirstOrThrow();
  if (row.value === mine) return;
  throw new ConfigError(
    `KEY_PEPPER differs from the one this database's keys were made with (${pepperFromEnv ? 'KEY_PEPPER is set, to another value' : 'KEY_PEPPER is not set, so this instance made its own under DATA_DIR'}): ` +
      'every key made by the other instances would be refused with 401. Set KEY_PEPPER to the same value on every instance that shares the database. ' +
      `(To start over with a new pepper on purpose, which makes every existing key stop working, delete the row '${PEPPER_FINGERPRINT_SETTING}' from the settings table.)`,
  );
}
