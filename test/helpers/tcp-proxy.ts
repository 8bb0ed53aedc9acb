/**
 * A small TCP proxy on 127.0.0.1 for fault tests: it forwards to a real service (PostgreSQL, Redis) and can
 * be cut (every open connection destroyed, new ones refused) and restored, without touching the service.
 *
 *   const p = await startTcpProxy(TEST_PG.port, TEST_PG.host);   // services.ts: the test PostgreSQL
 *   ... DATABASE_URL=testPgUrl({ viaPort: p.port })
 *   await p.cut();      // like the server going away
 *   await p.restore();  // it is back (same port)
 */
import net from 'node:net';

export interface TcpProxy {
  port: number;
  /** connections accepted since start */
  readonly accepted: number;
  readonly isCut: boolean;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<net.Socket>();
  let accepted = 0;
  let cut = false;
  let port = 0;

  const onConnection = (client: net.Socket) => {
    if (cut) {
      client.destroy();
      return;
    }
    accepted++;
    const upstream = net.connect(targetPort, targetHost);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    pairs.add(client);
    pairs.add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(client);
      pairs.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  };

  let server = net.createServer(onConnection);
  const listen = (s: net.Server, p: number) =>
    new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(p, '127.0.0.1', () => {
        s.off('error', reject);
        resolve();
      });
    });
  await listen(server, 0);
  port = (server.address() as net.AddressInfo).port;

  const closeServer = () => new Promise<void>((r) => server.close(() => r()));

  return {
    get port() {
      return port;
    },
    get accepted() {
      return accepted;
    },
    get isCut() {
      return cut;
    },
    async cut() {
      if (cut) return;
      cut = true;
      // refuse new connections (ECONNREFUSED) and reset the open ones
      const closed = closeServer();
      for (const s of pairs) {
        if (s.resetAndDestroy) s.resetAndDestroy();
        else s.destroy();
      }
      pairs.clear();
      await closed;
    },
    async restore() {
      if (!cut) return;
      server = net.createServer(onConnection);
      // the port was ours a moment ago; retry briefly in case the kernel has not released it yet
      for (let i = 0; ; i++) {
        try {
          await listen(server, port);
          break;
        } catch (e) {
          if (i >= 50) throw e;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      cut = false;
    },
    async close() {
      for (const s of pairs) s.destroy();
      pairs.clear();
      if (!cut) await closeServer();
      cut = true;
    },
  };
}
