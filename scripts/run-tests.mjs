#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node's test runner.
// Usage: node scripts/run-tests.mjs [outDir] [filter...]
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const outDir = process.env.TEST_OUT_DIR || 'dist';
const filters = process.argv.slice(2);
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith('.test.js') && (filters.length === 0 || filters.some((f) => p.includes(f)))) files.push(p);
  }
})(join(outDir, 'test'));
files.sort();
const args = ['--enable-source-maps', '--test', `--test-concurrency=${process.env.TEST_CONCURRENCY || 2}`, '--test-timeout=180000', ...files];
const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exit(r.status ?? 1);
