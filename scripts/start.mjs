#!/usr/bin/env node
// `npm start`: builds the app once (only when the sources changed since the last build, or there is none), then
// runs `portico serve` in this process. Arguments after `npm start --` go to serve.
import { existsSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { sourcesHash } from './sources-hash.mjs';

const stamp = (() => {
  try {
    return JSON.parse(readFileSync('dist/.build-stamp', 'utf8'));
  } catch {
    return undefined;
  }
})();
if (!stamp || stamp.sources !== sourcesHash() || !existsSync('dist/src/cli/main.js')) {
  console.error(stamp ? 'portico: the sources changed since the last build; building (once)...' : 'portico: first start; building (once)...');
  const r = spawnSync(process.execPath, ['scripts/build.mjs', '--app'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
process.argv = [process.argv[0], resolve('dist/src/cli/main.js'), 'serve', ...process.argv.slice(2)];
await import(pathToFileURL(resolve('dist/src/cli/main.js')).href);
