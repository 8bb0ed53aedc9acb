#!/usr/bin/env node
// One pass of scripts/run-tests.mjs: the given test files through node:test's run(), which starts them in the order
// given (`node --test <files>` sorts them by name), `concurrency` at once, each in a process of its own as with
// `node --test`. TAP on stdout; each file's time to `timesFile` (scripts/test-times.mjs). Exit 1 when a test failed.
// Usage: node [--enable-source-maps] scripts/test-pass.mjs <concurrency> <timeoutMs> <timesFile> <file>...
import { createWriteStream } from 'node:fs';
import { PassThrough } from 'node:stream';
import { run } from 'node:test';
import { tap } from 'node:test/reporters';
import testTimes from './test-times.mjs';

const [concurrency, timeout, timesFile, ...files] = process.argv.slice(2);
// the failed tests, one JSON line each, beside the times: scripts/run-tests.mjs prints them again after the whole run,
// so that the end of a long log (all a CI page may keep) names what failed and why
const failures = createWriteStream(`${timesFile}.failed`);
const stream = run({ files, concurrency: Number(concurrency), timeout: Number(timeout) });
const toTap = new PassThrough({ objectMode: true });
const toTimes = new PassThrough({ objectMode: true });
stream.pipe(toTap);
stream.pipe(toTimes);
stream.on('test:fail', (d) => {
  if (d.todo || d.skip) return;
  process.exitCode = 1;
  const e = d.details?.error;
  // a suite fails with 'N subtests failed' when one of its tests did: those tests carry the reason
  if (e?.failureType === 'subtestsFailed') return;
  const cause = e?.cause ?? e;
  const why = String(cause?.stack ?? cause?.message ?? cause ?? e)
    .split('\n')
    .slice(0, 12)
    .join('\n');
  failures.write(`${JSON.stringify({ file: d.file, name: d.name, why })}\n`);
});
toTap.compose(tap).pipe(process.stdout);
toTimes.compose(testTimes).pipe(createWriteStream(timesFile));
