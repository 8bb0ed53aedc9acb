import { createRequire } from 'node:module';
import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger } from 'pino';

const require = createRequire(import.meta.url);

/**
 * The process's one logger (Fastify's request loggers are its children). Credentials and bodies are removed
 * from whatever is logged under these paths, at every level.
 *
 * `format`: `json` writes one JSON object a line (what log collectors read); `pretty` writes coloured,
 * human-readable lines (pino-pretty, in this thread); `auto` (LOG_FORMAT unset) is pretty when stdout is a
 * terminal and JSON otherwise. A destination given by the caller (tests) gets JSON unless `pretty` is asked for.
 */
export function createLogger(level: string, destination?: DestinationStream, format: 'pretty' | 'json' | 'auto' = 'auto'): Logger {
  const opts = {
    level,
    redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.body', 'headers.authorization', 'headers.cookie'], remove: true },
  };
  const pretty = format === 'pretty' || (format === 'auto' && destination === undefined && process.stdout.isTTY === true);
  if (pretty) {
    // loaded only here: JSON logging (production) never loads it
    const build = require('pino-pretty') as (o: Record<string, unknown>) => DestinationStream;
    const colorize = destination === undefined ? process.stdout.isTTY === true : format === 'pretty';
    return pino(opts, build({ colorize, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', destination: destination ?? 1, sync: true }));
  }
  return destination ? pino(opts, destination) : pino(opts);
}
