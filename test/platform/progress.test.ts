import { test } from 'node:test';
import assert from 'node:assert/strict';
import { withProgress } from '../../src/platform/ops/progress.js';
import { captureLog } from '../helpers/log.js';
import { waitFor } from '../helpers/wait.js';
import type { Logger } from '../../src/platform/log.js';

test('slow work is said on the log: a first line, then one every few seconds, then how long it took', async () => {
  const { log, lines } = captureLog();
  const phases: Array<string | undefined> = [];
  let finish!: (v: number) => void;
  const work = new Promise<number>((r) => (finish = r));
  const done = withProgress(log as unknown as Logger, 'creating the database', work, { firstAfterMs: 20, everyMs: 20, onPhase: (p) => phases.push(p) });
  assert.deepEqual(phases, ['creating the database'], 'the phase is told as the work starts');
  await waitFor(() => lines.length >= 3, { what: 'three progress lines' });
  assert.match(lines[0]!.msg, /^creating the database\.\.\. \(\d+ s\)$/);
  assert.match(lines[1]!.msg, /^still creating the database \(\d+ s\)$/);
  assert.equal(lines[0]!.obj.phase, 'creating the database');
  finish(42);
  assert.equal(await done, 42, 'the work’s value is given back');
  const last = lines.at(-1)!;
  assert.match(last.msg, /^creating the database: done in \d+\.\d s$/);
  assert.equal(typeof last.obj.ms, 'number');
  const count = lines.length;
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(lines.length, count, 'nothing more is said once the work is done');
  assert.deepEqual(phases, ['creating the database', undefined], 'the phase is cleared at the end');
});

test('quick work writes nothing; failing work is passed on and its timer stopped', async () => {
  const { log, lines } = captureLog();
  assert.equal(await withProgress(log as unknown as Logger, 'opening the database', async () => 'ok', { firstAfterMs: 1_000 }), 'ok');
  assert.equal(lines.length, 0);
  await assert.rejects(withProgress(log as unknown as Logger, 'migrating', Promise.reject(new Error('migration 0009 failed')), { firstAfterMs: 10, everyMs: 10 }), /0009/);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(lines.length, 0, 'no progress line after the work failed');
});
