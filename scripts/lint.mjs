#!/usr/bin/env node
// `npm run lint`: eslint, prettier (./check-format.mjs) and the two type checks (the server's strict one, the
// page's), two at a time (each is one thread: on 2 cores the four took ~72 s one after the other on a quiet machine,
// and a reviewer's lint was seen to stop part-way, as a time limit would stop it). Each step keeps a cache of what it
// found in node_modules/.cache (eslint's by content, prettier's by content, tsc's build info), so a second lint
// checks only what changed. A step's output is printed whole when it ends, under its name, with its time; the last
// line names the steps that failed. Exit status 1 when any did.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** a package's command, run by this Node (its bin file: eslint's is not among the paths its package exports) */
const bin = (pkg, path) => fileURLToPath(new URL(`../node_modules/${pkg}/${path}`, import.meta.url));
const CACHE = 'node_modules/.cache';

const steps = [
  { name: 'eslint', args: [bin('eslint', 'bin/eslint.js'), '.', '--cache', '--cache-strategy', 'content', '--cache-location', `${CACHE}/eslint/`] },
  { name: 'prettier', args: ['scripts/check-format.mjs'] },
  {
    name: 'tsc (server, strict)',
    args: [bin('typescript', 'bin/tsc'), '-p', 'tsconfig.strict.json', '--incremental', '--tsBuildInfoFile', `${CACHE}/tsc/strict.tsbuildinfo`],
  },
  { name: 'tsc (page)', args: [bin('typescript', 'bin/tsc'), '-p', 'web/tsconfig.json', '--noEmit', '--incremental', '--tsBuildInfoFile', `${CACHE}/tsc/web.tsbuildinfo`] },
];
const AT_ONCE = 2;

function run(step) {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, step.args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', (e) => (out += `could not run: ${e.message}\n`));
    child.on('close', (code, signal) => {
      const ok = code === 0;
      const s = ((performance.now() - started) / 1000).toFixed(1);
      process.stdout.write(`== ${step.name}: ${ok ? 'passed' : `FAILED (${signal ?? `exit ${code}`})`} in ${s} s\n${out}${out && !out.endsWith('\n') ? '\n' : ''}`);
      resolve(ok);
    });
  });
}

console.log(`lint: ${steps.map((s) => s.name).join(', ')} (${AT_ONCE} at a time)`);
const failed = [];
let next = 0;
await Promise.all(
  Array.from({ length: AT_ONCE }, async () => {
    while (next < steps.length) {
      const step = steps[next++];
      if (!(await run(step))) failed.push(step.name);
    }
  }),
);
console.log(failed.length ? `lint failed: ${failed.join(', ')}` : 'lint passed');
process.exit(failed.length ? 1 : 0);
