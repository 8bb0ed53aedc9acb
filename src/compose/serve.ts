import type { Config } from '../platform/config.js';
import { AppError } from '../platform/errors.js';
import { stopStreams } from '../platform/http/sse.js';
import { compileDeferred } from '../platform/http/validation.js';
import { createCore, type Core } from './core.js';
import { startMetricsServer, type MetricsServer } from '../platform/ops/metrics-server.js';
import { createRuntime, type Runtime, type RuntimeOptions } from './runtime.js';
import { listenEarly } from '../platform/http/early.js';

export interface RunningServer {
  runtime: Runtime;
  core: Core;
  url: string;
  /** /metrics on METRICS_PORT, when it has a port of its own */
  metricsUrl?: string;
  close(): Promise<void>;
}

/** Starts Portico: core, runtime, listening socket. */
export async function startServer(config: Config, opts: RuntimeOptions = {}): Promise<RunningServer> {
  // the socket first: /healthz answers while the database is created or opened (src/platform/http/early.ts)
  const early = await listenEarly({ host: config.host, port: config.port, limits: config.http });
  let core: Core;
  try {
    core = await createCore(config, { role: 'serve', onPhase: early.phase });
  } catch (e) {
    await early.close();
    throw e;
  }
  let runtime: Runtime;
  try {
    early.phase('loading the features');
    runtime = await createRuntime(core, { gracefulClose: true, serverFactory: early.factory, ...opts });
  } catch (e) {
    await early.close();
    await core.close();
    throw e;
  }
  const { app } = runtime;
  try {
    await app.listen({ port: config.port, host: config.host });
  } catch (e) {
    await app.close().catch(() => {});
    await early.close();
    await runtime.close();
    await core.close();
    throw e;
  }
  let metricsServer: MetricsServer | undefined;
  if (config.metrics.port !== undefined) {
    try {
      metricsServer = await startMetricsServer({
        host: config.metrics.host,
        port: config.metrics.port,
        token: config.metrics.token,
        scrape: runtime.scrape,
        contentType: runtime.metrics.registry.contentType,
      });
    } catch (e) {
      await app.close().catch(() => {});
      await runtime.close();
      await core.close();
      throw e;
    }
  }
  // the route validators not called yet are compiled now, in the background, one per turn of the event loop
  void compileDeferred((e) => core.log.error({ err: (e as Error).message }, 'a route schema does not compile: its route answers 500'));
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  let closing: Promise<void> | undefined;
  return {
    runtime,
    core,
    url: `http://${host}:${port}`,
    metricsUrl: metricsServer?.url,
    /**
     * Graceful shutdown: stop accepting, let running requests, streams and background jobs finish within
     * SHUTDOWN_GRACE_MS, then cut what is left and close storage.
     */
    close() {
      closing ??= (async () => {
        // past the grace period: streams still running end with an error event (what was generated is charged, as
        // when a client leaves), then every connection left is cut
        const force = setTimeout(() => {
          const { count, closed } = stopStreams(
            app.server,
            new AppError('service_unavailable', 'The server is shutting down: the response was stopped before it finished. Send it again.'),
          );
          if (count) core.log.warn({ streams: count, graceMs: config.shutdownGraceMs }, 'streams still running at the end of the shutdown grace period: stopped');
          void closed.then(() => app.server.closeAllConnections());
        }, config.shutdownGraceMs);
        // a keep-alive connection whose stream just ended becomes idle after close() began: close those as
        // they appear instead of waiting for the keep-alive timeout
        const idle = setInterval(() => app.server.closeIdleConnections(), 50);
        await Promise.all([app.close(), runtime.responses.service.close(config.shutdownGraceMs), metricsServer?.close()]);
        clearTimeout(force);
        clearInterval(idle);
        await runtime.close();
        await core.close();
      })();
      return closing;
    },
  };
}
