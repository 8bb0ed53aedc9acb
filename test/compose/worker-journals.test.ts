// Each worker of `serve --workers N` keeps its usage journal in DATA_DIR/workers/<id>. Records left in the journal
// of a worker that no longer exists (WORKERS lowered), or of the single process that ran before, are shipped by
// worker 1; a single process ships those the workers left. None is lost when the number of processes changes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/platform/config.js';
import { createCore, workerDir } from '../../src/compose/core.js';
import type { UsageInsert } from '../../src/portal/usage/store.js';

const row = (id: string): UsageInsert => ({
  record_id: id,
  request_id: `req_${id}`,
  key_id: 'key_x',
  user_id: 'u1',
  org_id: 'default',
  model: 'm',
  operation: 'responses',
  input_tokens: 3,
  output_tokens: 4,
  cached_tokens: 0,
  cache_write_tokens: 0,
  characters: 0,
  audio_seconds: 0,
  output_audio_seconds: 0,
  cost_micros: 0,
  created_at: Math.floor(Date.now() / 1000),
  spend_epoch: null,
  deployment: null,
});

const writeJournal = (dir: string, ids: string[]) => {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'usage-journal.ndjson'), ids.map((i) => JSON.stringify(row(i))).join('\n') + '\n');
};

const env = (dir: string, extra: Record<string, string> = {}) => ({ DATA_DIR: dir, JWT_SECRET: 'x'.repeat(40), KEY_PEPPER: 'p'.repeat(40), LOG_LEVEL: 'silent', ...extra });

async function ledgerIds(dir: string, extra: Record<string, string>): Promise<string[]> {
  const core = await createCore(loadConfig(env(dir, extra)), { role: 'serve', models: [] });
  try {
    await core.usage.flush();
    const rows = await core.db.db.selectFrom('usage_records').select('record_id').execute();
    return rows.map((r) => r.record_id!).sort();
  } finally {
    await core.close();
  }
}

test('worker 1 ships the journals of workers above WORKERS and of the single process before it; worker 2 leaves them', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-wj-'));
  try {
    writeJournal(dir, ['single-1']);
    writeJournal(workerDir(dir, 2), ['w2-1']);
    writeJournal(workerDir(dir, 3), ['w3-1', 'w3-2']);
    // worker 2 of 2 ships its own journal only
    assert.deepEqual(await ledgerIds(dir, { WORKERS: '2', PORTICO_WORKER_ID: '2' }), ['w2-1']);
    // worker 1 of 2 takes the single process's journal and worker 3's (3 > 2)
    assert.deepEqual(await ledgerIds(dir, { WORKERS: '2', PORTICO_WORKER_ID: '1' }), ['single-1', 'w2-1', 'w3-1', 'w3-2']);
    assert.equal(readFileSync(join(workerDir(dir, 3), 'usage-journal.ndjson'), 'utf8'), '', 'the adopted journal is emptied');
    assert.equal(readFileSync(join(dir, 'usage-journal.ndjson'), 'utf8'), '');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a single process ships what every worker left', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-wj-'));
  try {
    writeJournal(workerDir(dir, 1), ['a']);
    writeJournal(workerDir(dir, 2), ['b']);
    assert.deepEqual(await ledgerIds(dir, {}), ['a', 'b']);
    assert.ok(existsSync(join(dir, 'usage-journal.ndjson')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
