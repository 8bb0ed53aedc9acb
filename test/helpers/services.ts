/**
 * The PostgreSQL and Redis servers the tests use, from the two settings the README names:
 * - PORTICO_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test): tests make schemas of their own in
 *   it and drop them; nothing else in that database is touched.
 * - PORTICO_TEST_REDIS_URL (default redis://127.0.0.1:6379; PORTICO_TEST_REDIS_PORT still sets only the port): tests
 *   pick a database number of the server, but read and write only the keys under a prefix of their own (an
 *   installation's REDIS_PREFIX) and remove those; nothing is flushed.
 */
export const TEST_PG_URL = process.env.PORTICO_TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const TEST_REDIS_URL = process.env.PORTICO_TEST_REDIS_URL || `redis://127.0.0.1:${process.env.PORTICO_TEST_REDIS_PORT || 6379}`;

const pgUrl = new URL(TEST_PG_URL);
const redisUrl = new URL(TEST_REDIS_URL);
/** where the test PostgreSQL listens (for a TCP proxy in front of it) */
export const TEST_PG = { host: pgUrl.hostname || '127.0.0.1', port: Number(pgUrl.port || 5432) };
/** where the test Redis listens (for a TCP proxy in front of it) */
export const TEST_REDIS = { host: redisUrl.hostname || '127.0.0.1', port: Number(redisUrl.port || 6379) };

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

/** The test Redis's URL at database number `db`, reached through a proxy on 127.0.0.1:`viaPort` when given. */
export function testRedisUrl(db: number, viaPort?: number): string {
  const u = new URL(TEST_REDIS_URL);
  if (viaPort !== undefined) {
    u.hostname = '127.0.0.1';
    u.port = String(viaPort);
  }
  u.pathname = `/${db}`;
  return u.toString();
}
