/**
 * `npx portico` outside the checkout asks the npm registry for a package called portico (a squatter could publish
 * one): no example in the README, the docs, the server's hints or the page uses it. They use `portico`, the
 * installed CLI (README, "The portico command": `npm link` from the checkout, on PATH in the image, the absolute
 * path in the systemd unit). The one sentence that warns against it mentions the registry.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { packageRoot } from '../../src/platform/paths.js';

const ROOT = packageRoot();

function files(dir: string, ext: RegExp): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...files(p, ext));
    else if (ext.test(name)) out.push(p);
  }
  return out;
}

test('no example runs `npx portico`; the README says how to put `portico` on PATH', () => {
  const docs = [join(ROOT, 'README.md'), ...files(join(ROOT, 'docs'), /\.md$/)];
  const code = [...files(join(ROOT, 'src'), /\.tsx?$/), ...files(join(ROOT, 'web/src'), /\.tsx?$/), join(ROOT, 'Dockerfile'), join(ROOT, 'compose.yaml')];
  const found: string[] = [];
  for (const f of [...docs, ...code]) {
    readFileSync(f, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (/\bnpx\s+portico\b/.test(line) && !(docs.includes(f) && /registry/.test(line))) found.push(`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(found, []);
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  assert.match(readme, /^npm link\b/m);
  // and the docs do use the command: a guard against removing the examples instead of fixing them
  assert.ok((readme.match(/^portico (login|token|models) /gm) ?? []).length >= 3);
});
