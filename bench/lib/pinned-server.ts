/**
 * The server under test of bench/pinned.ts, alone in its process: Portico (in-process like bench:responses: PGlite
 * files in a temporary DATA_DIR, LOG_LEVEL warn) or the bare Fastify proxy, in front of the upstream given as
 * argv[2]. Prints one JSON line `{"url", "key"}` once it listens, and stops on SIGTERM.
 *
 *   node dist/bench/lib/pinned-server.js <upstream base url> portico|floor
 */
import type { ModelSpec } from '../../src/models/config.js';

const [upstream, what] = process.argv.slice(2);
if (!upstream || (what !== 'portico' && what !== 'floor')) {
  console.error('usage: pinned-server.js <upstream base url> portico|floor');
  process.exit(2);
}

let close: () => Promise<void>;
if (what === 'floor') {
  const { startFastifyFloorProxy } = await import('./floor-proxy.js');
  const f = await startFastifyFloorProxy(upstream);
  close = f.close;
  console.log(JSON.stringify({ url: f.url, key: 'none' }));
} else {
  const { startPortico } = await import('./portico.js');
  const models = [{ name: 'fast', provider: 'openai-compatible', base_url: upstream, type: 'text' } as ModelSpec];
  const p = await startPortico({ db: 'pglite', pglite: 'files', models, env: { LOG_LEVEL: 'warn' } });
  close = p.close;
  console.log(JSON.stringify({ url: p.url, key: await p.createKey('pinned') }));
}
process.once('SIGTERM', () => {
  void close().finally(() => process.exit(0));
});
