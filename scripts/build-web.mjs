#!/usr/bin/env node
// Builds the web page (web/) into dist/web: esbuild bundles web/src/main.tsx (Preact) into content-hashed
// assets (the charting library in a chunk of its own, loaded when a chart is first shown), writes index.html
// naming them, and stores .gz and .br companions so Portico serves compressed bytes without compressing per
// request. Prints the first load's weight (what index.html pulls in before any chart). The playground's microphone
// worklet (web/src/talk/capture-worklet.ts) is a module of its own, built first: an AudioWorklet is loaded by URL,
// and the page's CSP allows script only from 'self', so it is an asset whose hashed name the page is given
// (PORTICO_CAPTURE_WORKLET).
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { brotliCompressSync, gzipSync, constants } from 'node:zlib';

const out = 'dist/web';
const assets = join(out, 'assets');
rmSync(out, { recursive: true, force: true });
mkdirSync(assets, { recursive: true });

const worklet = await build({
  entryPoints: { 'capture-worklet': 'web/src/talk/capture-worklet.ts' },
  bundle: true,
  format: 'esm',
  outdir: assets,
  entryNames: '[name]-[hash]',
  minify: true,
  target: ['chrome111', 'firefox115', 'safari16.4'],
  metafile: true,
  logLevel: 'warning',
});
const workletPath = Object.keys(worklet.metafile.outputs).find((p) => p.endsWith('.js'));

const result = await build({
  entryPoints: { app: 'web/src/main.tsx' },
  define: { PORTICO_CAPTURE_WORKLET: JSON.stringify(`/assets/${workletPath.split('/').pop()}`) },
  bundle: true,
  splitting: true,
  format: 'esm',
  outdir: assets,
  entryNames: '[name]-[hash]',
  chunkNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  minify: true,
  target: ['chrome111', 'firefox115', 'safari16.4'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  metafile: true,
  legalComments: 'linked',
  logLevel: 'warning',
});

const icon = readFileSync('web/icon.svg');
const iconName = `icon-${createHash('sha256').update(icon).digest('hex').slice(0, 8)}.svg`;
writeFileSync(join(assets, iconName), icon);

const outputs = Object.entries(result.metafile.outputs);
const entry = outputs.find(([, o]) => o.entryPoint === 'web/src/main.tsx');
const [jsPath, jsMeta] = entry;
const name = (p) => p.split('/').pop();
const html = readFileSync('web/index.html', 'utf8')
  .replace('%JS%', `/assets/${name(jsPath)}`)
  .replace('%CSS%', `/assets/${name(jsMeta.cssBundle)}`)
  .replace('%ICON%', `/assets/${iconName}`);
writeFileSync(join(out, 'index.html'), html);

// what the first load fetches: index.html, the entry, the chunks it imports statically, its CSS, the icon
const first = new Set([join(out, 'index.html'), jsPath, jsMeta.cssBundle, join(assets, iconName)]);
const walk = (p) => {
  for (const imp of result.metafile.outputs[p]?.imports ?? []) {
    if (imp.kind === 'import-statement' && !first.has(imp.path)) {
      first.add(imp.path);
      walk(imp.path);
    }
  }
};
walk(jsPath);

let firstRaw = 0;
let firstGz = 0;
const compress = (path) => {
  const body = readFileSync(path);
  const gz = gzipSync(body, { level: 9 });
  writeFileSync(path + '.gz', gz);
  writeFileSync(path + '.br', brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }));
  return { raw: body.length, gz: gz.length };
};
for (const dir of [out, assets]) {
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (f === 'assets' || f.endsWith('.gz') || f.endsWith('.br')) continue;
    const { raw, gz } = compress(p);
    if (first.has(p)) {
      firstRaw += raw;
      firstGz += gz;
    }
  }
}
const kb = (n) => (n / 1024).toFixed(1);
console.log(`web: dist/web built; first load ${kb(firstRaw)} kB (${kb(firstGz)} kB gzip) in ${first.size} files`);
