/**
 * The PostgreSQL and Redis servers the tests and benchmarks use, from the two settings the README names:
 * - PORTICO_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test): tests make databases and schemas of
 *   their own on that server and in that database and drop them; nothing else is touched.
 * - PORTICO_TEST_REDIS_URL (default redis://127.0.0.1:6379, i.e. database 0): every test uses the database that URL
 *   names and no other; each reads and writes only keys under a prefix of its own (an installation's REDIS_PREFIX,
 *   testRedisPrefix()) and removes those keys after (dropInstallationKeys in redis-keys.ts); nothing is flushed.
 */
import { randomBytes } from 'node:crypto';

export const TEST_PG_URL = process.env.PORTICO_TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const TEST_REDIS_URL = process.env.PORTICO_TEST_REDIS_URL || 'redis://127.0.0.1:6379';

const pgUrl = new URL(TEST_PG_URL);
const redisUrl = new URL(TEST_REDIS_URL);
/** where the test PostgreSQL listens (for a TCP proxy in front of it) */
export const TEST_PG = { host: pgUrl.hostname || '127.0.0.1', port: Number(pgUrl.port || 5432) };
/**
 * Where the test Redis listens (for a TCP proxy in front of it) and the connection options of the URL (for a
 * client given options rather than a URL, as BullMQ's): the database number is the URL's (default 0).
 */
export const TEST_REDIS = {
  host: redisUrl.hostname || '127.0.0.1',
  port: Number(redisUrl.port || 6379),
  db: Number(decodeURIComponent(redisUrl.pathname.slice(1)) || 0),
  ...(redisUrl.username ? { username: decodeURIComponent(redisUrl.username) } : {}),
  ...(redisUrl.password ? { password: decodeURIComponent(redisUrl.password) } : {}),
};

/** The test PostgreSQL's URL, reached through a proxy on 127.0.0.1:`viaPort` when given, with a search_path when given. */
export function testPgUrl(opts: { viaPort?: number; searchPath?: string } = {}): string {
  const u = new URL(TEST_PG_URL);
  if (opts.viaPort !== undefined) {
    u.hostname = '127.0.0.1';
    u.port = String(opts.viaPort);
  }
  const url = u.toString();
  // encoded as pg's connection strings expect it (a `+` would not be read as a space)
  return opts.searchPath === undefined ? url : `${url}${u.search ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${opts.searchPath}`)}`;
}

/** The test Redis's URL (its own database number, never another), reached through a proxy on 127.0.0.1:`viaPort` when given. */
export function testRedisUrl(viaPort?: number): string {
  const u = new URL(TEST_REDIS_URL);
  if (viaPort !== undefined) {
    u.hostname = '127.0.0.1';
    u.port = String(viaPort);
  }
  return u.toString();
}

/** What every test's Redis prefix starts with (so a run's leftovers, if any, are easy to find: `--scan --pattern 'portico_test:*'`) */
export const TEST_REDIS_ROOT = 'portico_test';

/**
 * A Redis key prefix no other test, run or checkout uses: the REDIS_PREFIX of a test's installation
 * (`portico_test:<what>:<random>`). Its keys are removed with dropInstallationKeys(testRedisUrl(), prefix).
 */
export function testRedisPrefix(what = 't'): string {
  return `${TEST_REDIS_ROOT}:${what}:${randomBytes(6).toString('hex')}`;
}
