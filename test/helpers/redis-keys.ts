/**
 * Removes the Redis keys of one test installation: those under its prefix (`<prefix>:*`, REDIS_PREFIX or the
 * default `portico:<installation id>`), and nothing else. Installations made by tests each get a prefix of their
 * own, so without this every run would leave its few keys behind (BullMQ's queue metadata, rate-limit windows).
 */
export async function dropInstallationKeys(redisUrl: string, prefix: string): Promise<void> {
  if (!/^[A-Za-z0-9][A-Za-z0-9:._-]*$/.test(prefix)) throw new Error(`not a prefix: ${prefix}`);
  // loaded here, not with the module: every test app's helper imports this file, and most never use Redis (ioredis
  // is ~0.14 s of CPU to load)
  const { Redis } = await import('ioredis');
  const r = new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect();
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      if (keys.length) await r.unlink(...keys);
      cursor = next;
    } while (cursor !== '0');
  } catch {
    // Redis away (a test that cut it): nothing to clean that can be reached
  } finally {
    r.disconnect();
  }
}
