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
const stream = run({ files, concurrency: Number(concurrency), timeout: Number(timeout) });
const toTap = new PassThrough({ objectMode: true });
const toTimes = new PassThrough({ objectMode: true });
stream.pipe(toTap);
stream.pipe(toTimes);
stream.on('test:fail', (d) => {
  if (!d.todo && !d.skip) process.exitCode = 1;
});
toTap.compose(tap).pipe(process.stdout);
toTimes.compose(testTimes).pipe(createWriteStream(timesFile));
