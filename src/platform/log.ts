import pino, { type DestinationStream, type Logger } from 'pino';

export type { Logger } from 'pino';

/**
 * The process's one logger (Fastify's request loggers are its children). Credentials and bodies are removed
 * from whatever is logged under these paths, at every level.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const opts = {
    level,
    redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.body', 'headers.authorization', 'headers.cookie'], remove: true },
  };
  return destination ? pino(opts, destination) : pino(opts);
}
