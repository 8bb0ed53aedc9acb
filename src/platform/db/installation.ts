import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export const INSTALLATION_SETTING = 'installation_id';

/**
 * The installation's id: 16 random hex characters, made by the first process that starts on the database and
 * kept in it (settings `installation_id`), so every instance, worker and operator command of one installation reads
 * the same id and two installations (two databases, or two schemas of one) never do. It names what the
 * installation shares through Redis and LISTEN/NOTIFY (the default REDIS_PREFIX: docs/deployment.md). A copy of
 * the database (a backup restored for staging) carries it: give the copy REDIS_PREFIX, or delete the row there.
 */
export async function installationId(db: Kysely<Database>): Promise<string> {
  await db
    .insertInto('settings')
    .values({ key: INSTALLATION_SETTING, value: randomBytes(8).toString('hex') })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  const row = await db.selectFrom('settings').select('value').where('key', '=', INSTALLATION_SETTING).executeTakeFirstOrThrow();
  return row.value;
}
