import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RunManager } from '../../src/responses/runs.js';
import { captureLog } from '../helpers/log.js';
import { waitFor } from '../helpers/wait.js';

test('a background job that throws is logged once, at error level, with its response id', async () => {
  const { log, lines } = captureLog();
  const runs = new RunManager(2, log);
  const run = runs.submit('resp_broken', async () => {
    throw new Error('relation "responses" does not exist');
  });
  await waitFor(() => run.done, { what: 'the run to end', timeoutMs: 2000 });
  assert.equal(lines.length, 1);
  assert.equal(lines[0]!.level, 'error');
  assert.equal(lines[0]!.obj.id, 'resp_broken');
  assert.match(String(lines[0]!.obj.err), /relation "responses" does not exist/);
  // the manager goes on: the next job runs and a job that succeeds logs nothing
  let ran = false;
  const ok = runs.submit('resp_fine', async () => {
    ran = true;
  });
  await waitFor(() => ok.done, { what: 'the run to end', timeoutMs: 2000 });
  assert.equal(ran, true);
  assert.equal(lines.length, 1);
  await runs.close();
});

test('a job stopped by cancel or shutdown that then throws is not an error: one info line', async () => {
  const { log, lines } = captureLog();
  const runs = new RunManager(1, log);
  const abortable = (run: { controller: AbortController }) =>
    new Promise<void>((_, reject) => run.controller.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }));
  const cancelled = runs.submit('resp_cancelled', abortable);
  cancelled.cancelRequested = true;
  cancelled.controller.abort(new Error('cancelled'));
  await waitFor(() => cancelled.done, { what: 'the run to end', timeoutMs: 2000 });
  assert.deepEqual(
    lines.map((l) => [l.level, l.obj.id, l.obj.reason]),
    [['info', 'resp_cancelled', 'cancelled']],
  );
  // shutdown: the running job is aborted by close() and its rejection is logged at info
  const running = runs.submit('resp_running', abortable);
  await runs.close(0);
  assert.equal(running.done, true);
  assert.deepEqual(
    lines.map((l) => [l.level, l.obj.id, l.obj.reason]),
    [
      ['info', 'resp_cancelled', 'cancelled'],
      ['info', 'resp_running', 'stopped'],
    ],
  );
  assert.equal(lines.filter((l) => l.level === 'error').length, 0);
});
