#!/usr/bin/env node
// `npm start`: builds the app once (only when the sources changed since the last build, or there is none), then
// runs `portico serve` in this process. Arguments after `npm start --` go to serve.
//
// The build is esbuild's (scripts/build.mjs --app: a few seconds, no type-checking, no compiler needed on the
// host). An application folder that is read-only (a production install, a container) is never written to: when
// its build is current nothing is built; when it is not, the start says what to run where it can write.
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
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
const built = existsSync('dist/src/cli/main.js');
// a folder with sources but a stale or missing build
if (!stamp || !built || (existsSync('src') && stamp.sources !== sourcesHash())) {
  const writable = (() => {
    try {
      accessSync('.', constants.W_OK);
      return !existsSync('dist') || (accessSync('dist', constants.W_OK), true);
    } catch {
      return false;
    }
  })();
  if (!writable) {
    if (built)
      console.error(
        'portico: the build in dist/ is older than the sources, and this folder is read-only: serving the build as it is (run `npm run build -- --app` where the folder is writable)',
      );
    else {
      console.error('portico: there is no build in dist/ and this folder is read-only: run `node scripts/build.mjs --app` (or `npm start` once) where it is writable');
      process.exit(1);
    }
  } else {
    const t0 = Date.now();
    console.error(stamp ? 'portico: the sources changed since the last build; building (a few seconds)...' : 'portico: first start; building (a few seconds)...');
    // a line every few seconds should the build take long (a slow or busy machine)
    const ticker = setInterval(() => console.error(`portico: still building (${Math.round((Date.now() - t0) / 1000)} s)`), 3000);
    const status = await new Promise((res) => spawn(process.execPath, ['scripts/build.mjs', '--app', '--quiet'], { stdio: 'inherit' }).once('exit', (code) => res(code)));
    clearInterval(ticker);
    if (status !== 0) process.exit(status ?? 1);
    console.error(`portico: built in ${((Date.now() - t0) / 1000).toFixed(1)} s; starting`);
  }
}
process.argv = [process.argv[0], resolve('dist/src/cli/main.js'), 'serve', ...process.argv.slice(2)];
await import(pathToFileURL(resolve('dist/src/cli/main.js')).href);
