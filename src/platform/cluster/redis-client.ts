import { createRequire } from 'node:module';
import type { Redis as RedisClient } from 'ioredis';

const require = createRequire(import.meta.url);

/**
 * ioredis, loaded the first time a Redis connection is made: a Portico without REDIS_URL never pays its
 * ~20 MiB of memory and its load time (docs/performance.md, "Start-up and memory").
 */
export function redisClass(): typeof RedisClient {
  return (require('ioredis') as typeof import('ioredis')).Redis;
}
