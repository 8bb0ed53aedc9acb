import type { FastifyInstance } from 'fastify';
import { buildApp, closeServices, createServices, type AppOptions, type Services } from './app.js';
import type { Config } from './platform/config.js';
import { apiPlugins } from './api/plugins.js';

export interface RunningServer {
  app: FastifyInstance;
  services: Services;
  url: string;
  close(): Promise<void>;
}

/** Starts Portico: services, routes, listening socket. */
export async function startServer(config: Config, opts: AppOptions = {}): Promise<RunningServer> {
  const services = await createServices(config);
  let app: FastifyInstance;
  try {
    app = await buildApp(services, { apiPlugins, gracefulClose: true, ...opts });
    await app.listen({ port: config.port, host: config.host });
  } catch (e) {
    await closeServices(services);
    throw e;
  }
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  let closing: Promise<void> | undefined;
  return {
    app,
    services,
    url: `http://${host}:${port}`,
    /**
     * Graceful shutdown: stop accepting, let running requests, streams and background jobs finish within
     * SHUTDOWN_GRACE_MS, then cut what is left and close storage.
     */
    close() {
      closing ??= (async () => {
        const force = setTimeout(() => app.server.closeAllConnections(), config.shutdownGraceMs);
        // a keep-alive connection whose stream just ended becomes idle after close() began: close those as
        // they appear instead of waiting for the keep-alive timeout
        const idle = setInterval(() => app.server.closeIdleConnections(), 50);
        await Promise.all([app.close(), services.responses.close(config.shutdownGraceMs)]);
        clearTimeout(force);
        clearInterval(idle);
        await closeServices(services);
      })();
      return closing;
    },
  };
}
