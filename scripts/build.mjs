#!/usr/bin/env node
// Builds Portico into dist/: the TypeScript (everything, or with --app only src/, which is what `npm start` and a
// production install need: no test or benchmark dependencies), the web page (type-checked, then bundled by
// scripts/build-web.mjs), and a stamp of the sources it was built from (dist/.build-stamp) so `npm start`
// builds only when something changed (scripts/start.mjs).
//
// Three pure-ESM libraries come as hundreds of small modules each (typebox 373, kysely 262, jose 46 files loaded
// at start): Node reads, compiles and links every one, ~0.35 s of a ~1 s start. The build bundles each into one
// file under dist/vendor/ (esbuild, a dependency) and points the compiled code's imports of them there; the
// packages themselves stay as npm installed them. See docs/performance.md, "Start-up and memory".
import { spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { sourcesHash } from './sources-hash.mjs';

const VENDORED = ['typebox', 'kysely', 'jose'];

const app = process.argv.includes('--app');
const require = createRequire(import.meta.url);
let tsc;
try {
  tsc = require.resolve('typescript/bin/tsc');
} catch {
  console.error('portico: building needs the typescript package (npm ci installs it); it is missing from node_modules');
  process.exit(1);
}
const run = (args) => {
  const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
};

/** dist/vendor/<name>.js: the package as one ES module */
async function bundleVendored() {
  const { build } = await import('esbuild');
  for (const name of VENDORED) {
    await build({
      stdin: { contents: `export * from '${name}';`, resolveDir: process.cwd(), loader: 'js' },
      bundle: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      outfile: `dist/vendor/${name}.js`,
      logLevel: 'warning',
    });
  }
}

/** `from 'kysely'` and `import('kysely')` in every compiled file become the relative path of the bundle */
function pointImportsAtVendored(dir) {
  const re = new RegExp(`(\\bfrom\\s*|\\bimport\\s*\\(\\s*)(['"])(${VENDORED.join('|')})\\2`, 'g');
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (p !== join('dist', 'vendor') && p !== join('dist', 'web')) pointImportsAtVendored(p);
      continue;
    }
    if (!name.endsWith('.js')) continue;
    const text = readFileSync(p, 'utf8');
    const out = text.replace(re, (_m, lead, q, mod) => {
      let rel = relative(dirname(p), join('dist', 'vendor', `${mod}.js`))
        .split(sep)
        .join('/');
      if (!rel.startsWith('.')) rel = `./${rel}`;
      return `${lead}${q}${rel}${q}`;
    });
    if (out !== text) writeFileSync(p, out);
  }
}

rmSync('dist', { recursive: true, force: true });
run([tsc, '-p', app ? 'tsconfig.app.json' : 'tsconfig.json']);
await bundleVendored();
pointImportsAtVendored('dist');
run([tsc, '-p', 'web/tsconfig.json']);
run(['scripts/build-web.mjs']);
chmodSync('dist/src/cli/main.js', 0o755);
writeFileSync('dist/.build-stamp', JSON.stringify({ sources: sourcesHash(), scope: app ? 'app' : 'all', at: new Date().toISOString() }) + '\n');
