#!/usr/bin/env node
// Builds Portico into dist/: the TypeScript (everything, or with --app only src/, which is what `npm start` and a
// production install need: no test or benchmark dependencies), the web page (type-checked, then bundled by
// scripts/build-web.mjs), and a stamp of the sources it was built from (dist/.build-stamp) so `npm start`
// builds only when something changed (scripts/start.mjs).
import { spawnSync } from 'node:child_process';
import { chmodSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { sourcesHash } from './sources-hash.mjs';

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

rmSync('dist', { recursive: true, force: true });
run([tsc, '-p', app ? 'tsconfig.app.json' : 'tsconfig.json']);
run([tsc, '-p', 'web/tsconfig.json']);
run(['scripts/build-web.mjs']);
chmodSync('dist/src/cli/main.js', 0o755);
writeFileSync('dist/.build-stamp', JSON.stringify({ sources: sourcesHash(), scope: app ? 'app' : 'all', at: new Date().toISOString() }) + '\n');
