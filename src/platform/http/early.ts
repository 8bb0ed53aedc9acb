/**
 * The listening socket, opened before anything slow: a first start creates the embedded database (~10 s on two
 * cores), and a process that does not answer for that long looks dead to a health check, a container runtime or
 * the person who just typed `npm start`. The server listens at once and answers while the rest starts:
 * `/healthz` 200 (the process is up) with what it is doing, `/readyz` 503 with the same, and every other request
 * 503 `service_unavailable` with `Retry-After` in the shape of its route group. When the app is ready it takes the
 * same server over (Fastify's `serverFactory`), so no connection is refused in between; a port already in use is
 * found before the database is touched.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { HttpLimits } from '../config.js';
import { AppError, msg } from '../errors.js';
import { openAIErrorBody } from './errors.js';
import { portalErrorBody } from './portal-envelope.js';

/** A Node server with the limits of HTTP_* settings (docs/deployment.md), for `handler`. */
export function createLimitedServer(l: HttpLimits, handler?: http.RequestListener): http.Server {
  const server = http.createServer(
    { connectionsCheckingInterval: 1000, requestTimeout: l.requestTimeoutMs, headersTimeout: l.headersTimeoutMs, keepAliveTimeout: l.keepAliveTimeoutMs },
    handler,
  );
  server.maxConnections = l.maxConnections;
  return server;
}

export interface EarlyServer {
  /** the Fastify serverFactory that hands this server, already listening, to the app */
  factory: (handler: http.RequestListener) => http.Server;
  /** what the process is doing now (undefined: starting, nothing named) */
  phase(what: string | undefined): void;
  /** stops listening (the start failed before the app took the server over) */
  close(): Promise<void>;
}

/** Listens on host:port now; answers "starting" until the app built with `factory` listens. */
export async function listenEarly(opts: { host: string; port: number; limits: HttpLimits }): Promise<EarlyServer> {
  let phase: string | undefined;
  const startedAt = Date.now();
  const starting = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const doing = phase ?? 'starting';
    const headers = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };
    if (path === '/healthz') {
      res.writeHead(200, headers).end(JSON.stringify({ status: 'starting', phase: doing }));
      return;
    }
    if (path === '/readyz') {
      res
        .writeHead(503, { ...headers, 'retry-after': '1' })
        .end(JSON.stringify({ status: 'starting', checks: { startup: `${doing} (${Math.round((Date.now() - startedAt) / 1000)} s)` } }));
      return;
    }
    // a person opening the page: a page that says so and looks again by itself
    if (req.method === 'GET' && !path.startsWith('/v1/') && /text\/html/.test(req.headers.accept ?? '')) {
      const text = escapeHtml(`Portico is starting (${doing}). This page reloads by itself.`);
      res
        .writeHead(503, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'retry-after': '2', 'content-security-policy': "default-src 'none'" })
        .end(
          `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>Portico is starting</title></head><body><p>${text}</p></body></html>`,
        );
      return;
    }
    const e = new AppError('service_unavailable', msg('server_starting', { phase: doing }));
    const id = `req_${randomUUID().replace(/-/g, '')}`;
    const lang = req.headers['accept-language'];
    const body = path === '/v1/portal' || path.startsWith('/v1/portal/') ? portalErrorBody(e, { id, headers: req.headers }) : openAIErrorBody(e, lang);
    // a body the client is still sending is not read: the connection ends with this answer
    res.writeHead(503, { ...headers, 'retry-after': '2', 'x-request-id': id, connection: 'close' }).end(JSON.stringify(body));
  };
  const server = createLimitedServer(opts.limits, starting);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: opts.port, host: opts.host }, () => {
      server.removeListener('error', reject);
      resolve();
    });
  });
  let adopted = false;
  return {
    factory(handler) {
      // Fastify calls listen() once the app is ready: the socket is open already, so the app's handler takes the
      // place of the "starting" one and the app is told it listens
      (server as { listen: unknown }).listen = (..._args: unknown[]) => {
        adopted = true;
        server.removeListener('request', starting);
        server.on('request', handler);
        process.nextTick(() => server.emit('listening'));
        return server;
      };
      return server;
    },
    phase(what) {
      phase = what;
    },
    async close() {
      if (adopted) return;
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
