import type { FastifyBaseLogger } from 'fastify';

export interface LogLine {
  level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
  obj: Record<string, unknown>;
  msg: string;
}

/** A pino-shaped logger that keeps its lines, for tests that assert what is logged. */
export function captureLog(): { log: FastifyBaseLogger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at = (level: LogLine['level']) => (obj: unknown, msg?: string) => {
    if (typeof obj === 'string') lines.push({ level, obj: {}, msg: obj });
    else lines.push({ level, obj: (obj ?? {}) as Record<string, unknown>, msg: msg ?? '' });
  };
  const log = {
    level: 'trace',
    fatal: at('fatal'),
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    trace: at('trace'),
    silent: () => {},
    child: () => log,
  } as unknown as FastifyBaseLogger;
  return { log, lines };
}
