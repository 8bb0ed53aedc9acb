import http from 'node:http';
import { AppError } from '../errors.js';
import { checkMetricsAccess } from './routes.js';

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

/**
 * /metrics on a port of its own (METRICS_PORT): a plain node:http listener that answers GET /metrics (with
 * METRICS_TOKEN when one is set) and 404 to everything else, so the API port need not expose it at all.
 */
export async function startMetricsServer(o: { host: string; port: number; token?: string; scrape: () => Promise<string>; contentType: string }): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    try {
      if (o.token) checkMetricsAccess({ mode: 'token', token: o.token }, req.socket.remoteAddress, req.headers.authorization);
    } catch (e) {
      res.writeHead(e instanceof AppError ? 401 : 500, { 'content-type': 'text/plain' }).end(`${(e as Error).message}\n`);
      return;
    }
    o.scrape().then(
      (text) => res.writeHead(200, { 'content-type': o.contentType }).end(req.method === 'HEAD' ? undefined : text),
      (e) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${(e as Error).message}\n`),
    );
  });
  server.requestTimeout = 10_000;
  server.headersTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : o.port;
  return {
    url: `http://${o.host.includes(':') ? `[${o.host}]` : o.host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
