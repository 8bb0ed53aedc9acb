#!/usr/bin/env node
// Builds Portico into dist/: the TypeScript (everything, or with --app only src/, which is what `npm start` and a
// production install need: no test or benchmark files), the web page (bundled by scripts/build-web.mjs), and a
// stamp of the sources it was built from (dist/.build-stamp) so `npm start` builds only when something changed
// (scripts/start.mjs). --pglite-template adds a dump of an empty migrated embedded database (see below).
//
// esbuild (a dependency) turns each .ts file into one .js file beside the same path under dist/, in about a
// second; it strips types and checks none. Type-checking is `npm run lint` (tsc on src, test, bench and the page)
// and `npm test` (--check: tsc before the tests run), never a user's first start (docs/architecture.md, "Build").
// tsconfig.json's isolatedModules makes tsc refuse what a file-by-file compiler would get wrong.
//
// Three pure-ESM libraries come as hundreds of small modules each (typebox 373, kysely 262, jose 46 files loaded
// at start): Node reads, compiles and links every one, ~0.35 s of a ~1 s start. The build bundles each into one
// file under dist/vendor/ and points the compiled code's imports of them there; the packages themselves stay as
// npm installed them. See docs/performance.md, "Start-up and memory".
//
// The CommonJS packages every process loads (Fastify and what it requires, Ajv, prom-client, ws, ...: ~300 files)
// are bundled the same way, in one build with shared chunks so a package two of them require (Ajv, ws, OpenTelemetry's
// API) is one copy, as in node_modules. Each bundle exports what Node's own `import` of the package gives (its names
// read by importing it here), and a `require` made from the bundle's own path (the banner) loads Node's built-in
// modules and the packages left out (EXTERNAL: pino, whose transports start worker files by their path, and ws's
// optional native add-ons). None of the bundled packages finds a file by its own path (__dirname, require.resolve).
// Left in node_modules on purpose: yaml (@fastify/swagger and swagger-ui require it themselves, and they find their
// static files by path), pino, @fastify/swagger*, @fastify/static. See docs/performance.md, "The test suite".
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { sourcesHash } from './sources-hash.mjs';

const VENDORED = ['typebox', 'kysely', 'jose'];
/** CommonJS packages bundled together (shared chunks); the OpenTelemetry SDK is loaded only with tracing on */
const VENDORED_CJS = [
  'fastify',
  '@fastify/fast-json-stringify-compiler',
  '@fastify/multipart',
  '@fastify/websocket',
  '@fastify/cors',
  '@fastify/helmet',
  'ws',
  'ajv',
  'ajv-formats',
  'prom-client',
  '@opentelemetry/api',
  '@opentelemetry/core',
  '@opentelemetry/resources',
  '@opentelemetry/sdk-trace-base',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/semantic-conventions',
];
/** required by the bundles at run time from node_modules, never bundled */
const EXTERNAL = ['pino', 'pino-pretty', 'thread-stream', 'bufferutil', 'utf-8-validate'];
/** dist/vendor/<file>.js of a package: @scope/name -> scope-name */
const vendorFile = (name) => name.replace(/^@/, '').replace(/\//g, '-');

const app = process.argv.includes('--app');
const check = process.argv.includes('--check');
const quiet = process.argv.includes('--quiet');
const template = process.argv.includes('--pglite-template');
const require = createRequire(import.meta.url);
const say = (line) => {
  if (!quiet) console.error(line);
};

let esbuild;
try {
  esbuild = await import('esbuild');
} catch {
  console.error('portico: building needs the esbuild package (a dependency npm ci installs); it is missing from node_modules');
  process.exit(1);
}

/** every .ts file under the roots (no .d.ts) */
function sources(roots) {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
    }
  };
  for (const r of roots) walk(r);
  return out;
}

/** `from 'kysely'` and `import('kysely')` in a compiled file become the relative path of the bundle */
const vendoredImport = new RegExp(`(\\bfrom\\s*|\\bimport\\s*\\(\\s*)(['"])(${[...VENDORED, ...VENDORED_CJS].join('|')})\\2`, 'g');
const pointAtVendored = {
  name: 'portico-vendored',
  setup(b) {
    b.onEnd((result) => {
      for (const file of result.outputFiles ?? []) {
        if (!file.path.endsWith('.js')) continue;
        const text = file.text;
        const out = text.replace(vendoredImport, (_m, lead, q, mod) => {
          let rel = relative(dirname(file.path), join(process.cwd(), 'dist', 'vendor', `${vendorFile(mod)}.js`))
            .split(sep)
            .join('/');
          if (!rel.startsWith('.')) rel = `./${rel}`;
          return `${lead}${q}${rel}${q}`;
        });
        if (out !== text) file.contents = Buffer.from(out);
      }
    });
  },
};

/** tsc without output: the whole project (src, test, bench) and the page */
function typeCheck() {
  let tsc;
  try {
    tsc = require.resolve('typescript/bin/tsc');
  } catch {
    console.error('portico: --check needs the typescript package (a devDependency); it is missing from node_modules');
    process.exit(1);
  }
  // incremental, with its record beside the project (not in dist/, which every build empties): a second run checks
  // only what changed
  for (const [project, record] of [
    ['tsconfig.json', '.check.tsbuildinfo'],
    ['web/tsconfig.json', '.check-web.tsbuildinfo'],
  ]) {
    const r = spawnSync(process.execPath, [tsc, '-p', project, '--noEmit', '--incremental', '--tsBuildInfoFile', record], { stdio: 'inherit' });
    if (r.status !== 0) process.exit(r.status ?? 1);
  }
}

const started = Date.now();
if (check) {
  say('portico: type-checking (tsc)...');
  typeCheck();
}
rmSync('dist', { recursive: true, force: true });
const entryPoints = sources(app ? ['src'] : ['src', 'test', 'bench']);
const result = await esbuild.build({
  entryPoints,
  outdir: 'dist',
  outbase: '.',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  logLevel: 'warning',
  write: false,
  plugins: [pointAtVendored],
});
// write after the plugin rewrote the imports
for (const f of result.outputFiles) {
  mkdirSync(dirname(f.path), { recursive: true });
  writeFileSync(f.path, f.contents);
}
for (const name of VENDORED) {
  await esbuild.build({
    stdin: { contents: `export * from '${name}';`, resolveDir: process.cwd(), loader: 'js' },
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    outfile: `dist/vendor/${name}.js`,
    logLevel: 'warning',
  });
}
// each entry names what Node's `import` of the package gives (a CommonJS package's names as Node's loader finds
// them, and its module.exports as default): an .mjs file, so esbuild gives default the same meaning as Node
const entries = mkdtempSync(join(tmpdir(), 'portico-vendor-'));
try {
  const entryPoints = {};
  for (const name of VENDORED_CJS) {
    const ns = await import(name);
    const names = Object.keys(ns).filter((n) => n !== '__esModule' && /^[A-Za-z_$][\w$]*$/.test(n));
    const file = join(entries, `${vendorFile(name)}.mjs`);
    writeFileSync(file, `export { ${names.join(', ')} } from '${name}';\n`);
    entryPoints[vendorFile(name)] = file;
  }
  await esbuild.build({
    entryPoints,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // Node's conditions only (esbuild adds `module` by default, which picks another build of some packages)
    conditions: [],
    nodePaths: [join(process.cwd(), 'node_modules')],
    external: EXTERNAL,
    banner: { js: "import { createRequire as __porticoRequire } from 'node:module'; const require = __porticoRequire(import.meta.url);" },
    outdir: 'dist/vendor',
    logLevel: 'warning',
  });
} finally {
  rmSync(entries, { recursive: true, force: true });
}
const r = spawnSync(process.execPath, ['scripts/build-web.mjs'], { stdio: quiet ? ['ignore', 'ignore', 'inherit'] : 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
chmodSync('dist/src/cli/main.js', 0o755);
// --pglite-template (an image's or a package's build): an empty database with this build's migrations, dumped, so a
// new DATA_DIR starts as a copy of it (~2 s) instead of initdb (~10 s on two cores); src/platform/config.ts finds it
if (template) {
  say('portico: making the embedded database template (dist/pglite-template.tar.gz)...');
  const make = `
    const { openDb } = await import('./dist/src/platform/db/index.js');
    const { writeFileSync } = await import('node:fs');
    const { gzipSync } = await import('node:zlib');
    const db = await openDb({ dataDir: process.cwd(), inMemory: true, thread: false });
    await db.migrate();
    writeFileSync('dist/pglite-template.tar.gz', gzipSync(await db.dump()));
    await db.close();`;
  const t = spawnSync(process.execPath, ['--input-type=module', '-e', make], { stdio: 'inherit' });
  if (t.status !== 0) process.exit(t.status ?? 1);
}
writeFileSync('dist/.build-stamp', JSON.stringify({ sources: sourcesHash(), scope: app ? 'app' : 'all', at: new Date().toISOString() }) + '\n');
say(`portico: built ${entryPoints.length} files in ${((Date.now() - started) / 1000).toFixed(1)} s`);
