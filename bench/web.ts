/**
 * npm run bench:web — the web page's weight and first render in Debian's Chromium.
 *
 * Weight: the bytes of each file of the first load (index.html, the entry script, the stylesheet, the icon; the
 * charting library is a chunk loaded only when a chart is shown), as Chromium received them (brotli, since it asks
 * for it) and gzip-compressed, with the uncompressed size. First render: cold loads (a new browser context each
 * time: empty cache, no cookies) of the sign-in page and of the keys page of a signed-in person, measured from the
 * navigation's start to the first contentful paint and to the screen's heading being on screen. BENCH_N loads
 * each (default 15); the median and the slowest are reported.
 */
import { gzipSync } from 'node:zlib';
import { startPortico } from './lib/portico.js';
import { mintSignInLink } from '../src/web/link.js';
import { launchChromium } from '../test/helpers/browser.js';

const N = Number(process.env.BENCH_N || 15);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const kb = (n: number) => (n / 1024).toFixed(1);

const portico = await startPortico({ db: 'pglite', models: [] });
const browser = await launchChromium();
try {
  // weight of the first load
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  const files: Array<{ url: string; transferred: number; encoding: string; raw: number; gzip: number }> = [];
  page.on('requestfinished', async (req: import('playwright-core').Request) => {
    if (!req.url().startsWith(portico.url) || req.url().includes('/v1/')) return;
    const res = (await req.response())!;
    const sizes = await req.sizes();
    const body = await res.body();
    files.push({
      url: new URL(req.url()).pathname,
      transferred: sizes.responseBodySize,
      encoding: res.headers()['content-encoding'] ?? 'none',
      raw: body.length,
      gzip: gzipSync(body, { level: 9 }).length,
    });
  });
  await page.goto(`${portico.url}/signin`);
  await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
  await page.waitForTimeout(300);
  await ctx.close();
  files.sort((a, b) => a.url.localeCompare(b.url));
  console.log('\nFirst load of the page (sign-in screen):\n');
  console.log('| file | received (encoding) | gzip | uncompressed |');
  console.log('| --- | ---: | ---: | ---: |');
  for (const f of files) console.log(`| ${f.url.replace(/-[A-Za-z0-9]{8}\./, '-HASH.')} | ${f.transferred} B (${f.encoding}) | ${f.gzip} B | ${f.raw} B |`);
  const sum = (k: 'transferred' | 'gzip' | 'raw') => files.reduce((a, f) => a + f[k], 0);
  console.log(`| **total** | **${kb(sum('transferred'))} kB** | **${kb(sum('gzip'))} kB** | **${kb(sum('raw'))} kB** |`);

  // first render, cold
  const measure = async (label: string, url: () => Promise<string>, heading: string) => {
    const fcp: number[] = [];
    const ready: number[] = [];
    for (let i = 0; i < N + 1; i++) {
      const c = await browser.newContext();
      const p = await c.newPage();
      await p.goto(await url());
      await p.getByRole('heading', { name: heading }).waitFor();
      const t = await p.evaluate(() => {
        const paint = performance.getEntriesByName('first-contentful-paint')[0];
        return { fcp: paint ? paint.startTime : NaN, ready: performance.now() };
      });
      await c.close();
      if (i === 0) continue; // the first load warms the server, not the browser
      fcp.push(t.fcp);
      ready.push(t.ready);
    }
    console.log(`| ${label} | ${median(fcp).toFixed(0)} | ${Math.max(...fcp).toFixed(0)} | ${median(ready).toFixed(0)} | ${Math.max(...ready).toFixed(0)} |`);
  };
  console.log(`\nCold loads (${N} each, new context: empty cache):\n`);
  console.log('| screen | first contentful paint, median (ms) | slowest (ms) | heading on screen, median (ms) | slowest (ms) |');
  console.log('| --- | ---: | ---: | ---: | ---: |');
  await measure('sign-in page', async () => `${portico.url}/signin`, 'Sign in to Portico');
  let n = 0;
  await measure(
    'keys page, signing in by link',
    async () => (await mintSignInLink({ pepper: portico.runtime.core.config.keyPepper, publicUrl: portico.url, userId: `bench-${n++}` })).url,
    'API keys',
  );
} finally {
  await browser.close();
  await portico.close();
}
