// A hash of everything a build reads (sources, configs, the lock), so an unchanged tree is never built twice.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const ROOTS = ['src', 'web'];
const FILES = ['tsconfig.json', 'tsconfig.app.json', 'package.json', 'package-lock.json', 'scripts/build.mjs', 'scripts/build-web.mjs'];

function walk(dir, out) {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (name === 'node_modules') continue;
    if (statSync(p).isDirectory()) walk(p, out);
    else out.push(p);
  }
}

export function sourcesHash() {
  const files = [];
  for (const r of ROOTS) if (existsSync(r)) walk(r, files);
  for (const f of FILES) if (existsSync(f)) files.push(f);
  const h = createHash('sha256');
  for (const f of files) h.update(f).update('\0').update(readFileSync(f)).update('\0');
  return h.digest('hex');
}
