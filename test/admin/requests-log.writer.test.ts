import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { RequestLog } from '../../src/platform/ops/request-log.js';
import { createCore } from '../../src/compose/core.js';
import { loadConfig } from '../../src/platform/config.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kysely } from 'kysely';
import { PGliteDialect } from '../../src/platform/db/pglite-dialect.js';
import type { PGliteQueryable } from '../../src/platform/db/pglite-client.js';

const logged = async (t: TestApp) =>
  Number(
    (
      await t.core.db.db
        .selectFrom('request_log')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('the request log: written off the request path, bounded, flushed on close, pruned', () => {
  test('rows wait in memory and are written in a batch; a graceful stop writes what is buffered (nothing lost)', async () => {
    // a database that outlives the app: files under DATA_DIR, opened again after the stop
    const dataDir = mkdtempSync(join(tmpdir(), 'portico-reqlog-'));
    try {
      const env = { DATA_DIR: dataDir, PORTICO_DB: '', DATABASE_URL: '' };
      // rows wait an hour for their batch: only the stop can write them
      const t = await buildTestApp({ env, models: [], runtime: { requestLogDelayMs: 3_600_000 } });
      const key = await t.inferenceKey('alice');
      for (let i = 0; i < 7; i++) {
        const res = await t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}`, 'x-request-id': `req_close_${i}` } });
        assert.equal(res.statusCode, 200);
      }
      // the answers went out before their rows were written (the write is batched by a timer, off the request path)
      assert.equal(await logged(t), 0, 'nothing written on the request path');
      // a graceful stop: the app, the runtime (the log flushed), the core
      await t.app.close();
      await t.runtime.close();
      await t.core.close();
      const config = loadConfig({ DATA_DIR: dataDir, PORTICO_DB: '', DATABASE_URL: '', JWT_SECRET: 'test-secret-0123456789abcdef0123456789abcdef', LOG_LEVEL: 'silent' });
      const core = await createCore(config, { role: 'serve', models: [] });
      try {
        const rows = await core.db.db.selectFrom('request_log').select(['request_id', 'status', 'route']).orderBy('request_id').execute();
        assert.deepEqual(
          rows.map((r) => r.request_id),
          [0, 1, 2, 3, 4, 5, 6].map((i) => `req_close_${i}`),
        );
        assert.ok(rows.every((r) => r.status === 200 && r.route === '/v1/models'));
      } finally {
        await core.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('a full buffer drops rows and counts them (portico_request_log_dropped_total) instead of growing', async () => {
    const t = await buildTestApp({ models: [], runtime: { requestLogMaxBuffered: 3 } });
    try {
      const key = await t.inferenceKey('alice');
      const sent = await Promise.all(
        Array.from({ length: 8 }, (_, i) => t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}`, 'x-request-id': `req_bound_${i}` } })),
      );
      assert.ok(
        sent.every((r) => r.statusCode === 200),
        'every request is answered all the same',
      );
      await t.runtime.requestLog.flush();
      const n = await logged(t);
      assert.ok(n >= 3 && n < 8, `kept ${n}`);
      assert.equal(t.runtime.requestLog.dropped, 8 - n);
      const scrape = await t.runtime.scrape();
      assert.match(scrape, new RegExp(`portico_request_log_dropped_total ${8 - n}\\b`));
    } finally {
      await t.close();
    }
  });

  test('under a steady load the writes start at least the interval apart, each taking what was pending when it began', async () => {
    // a database whose INSERT takes 20 ms: rows keep coming meanwhile
    const started: number[] = [];
    const written: string[] = [];
    const fake: PGliteQueryable = {
      closed: false,
      async query<R>(text: string, params: unknown[] = []) {
        if (/insert into request_log/i.test(text)) {
          started.push(performance.now());
          for (const r of JSON.parse(String(params[0])) as Array<{ request_id: string }>) written.push(r.request_id);
        }
        await new Promise((r) => setTimeout(r, 20));
        return { rows: [] as R[], affectedRows: 0 };
      },
      async close() {},
    };
    const log = new RequestLog(new Kysely<any>({ dialect: new PGliteDialect(fake) }), { delayMs: 250 });
    const row = (id: string) => logRow(id, 0, 0);
    // a first write (flushed, not paced) readies the query builder and the driver, which delays a first query's start
    // past its write's by ~10 ms and would shorten the first gap below
    log.add(row('first'));
    await log.flush();
    started.length = 0;
    let n = 0;
    const deadline = Date.now() + 20_000;
    while (started.length < 4 && Date.now() < deadline) {
      log.add(row(`r${n++}`));
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(started.length >= 4, `${started.length} writes`);
    const gaps = started.slice(1).map((t, i) => t - started[i]!);
    // the rule holds between the writes' starts, seen here as their queries' starts, which come a little after (1-3 ms
    // on a quiet machine, up to 17 ms seen at load 13): 25 ms of slack. The mistakes this guards against are far below:
    // writes one after the other (~20 ms apart here). A whole run (2026-11-29, 3 files at once) failed at 242 ms with 3 ms of slack.
    for (const g of gaps) assert.ok(g >= 225, `writes ${g.toFixed(1)} ms apart: ${gaps.map((x) => x.toFixed(0)).join(', ')}`);
    await log.close();
    // every row once, in order
    assert.deepEqual(written, ['first', ...Array.from({ length: n }, (_, i) => `r${i}`)]);
  });

  test('prune removes the rows older than the retention, and only those', async () => {
    const t = await buildTestApp({ models: [] });
    try {
      const now = Date.now();
      const row = (id: string, ageDays: number) => logRow(id, Math.floor(now / 1000 - ageDays * 86400), Math.round(now - ageDays * 86400_000));
      await t.core.db.db
        .insertInto('request_log')
        .values([row('req_old', 31), row('req_edge', 29.9), row('req_new', 0)])
        .execute();
      const log = new RequestLog(t.core.db.db);
      assert.equal(await log.prune(30, now), 1);
      const left = await t.core.db.db.selectFrom('request_log').select('request_id').orderBy('request_id').execute();
      assert.deepEqual(
        left.map((r) => r.request_id),
        ['req_edge', 'req_new'],
      );
    } finally {
      await t.close();
    }
  });

  test('PORTICO_REQUEST_LOG_DAYS is read, bounded, and 0 turns the log off', async () => {
    const base = { DATA_DIR: '/tmp/x', JWT_SECRET: 'test-secret-0123456789abcdef0123456789abcdef' };
    assert.equal(loadConfig(base).requestLogDays, 30);
    assert.equal(loadConfig({ ...base, PORTICO_REQUEST_LOG_DAYS: '7' }).requestLogDays, 7);
    assert.throws(() => loadConfig({ ...base, PORTICO_REQUEST_LOG_DAYS: '-1' }), /PORTICO_REQUEST_LOG_DAYS/);
    const t = await buildTestApp({ models: [], env: { PORTICO_REQUEST_LOG_DAYS: '0' } });
    try {
      const key = await t.inferenceKey('alice');
      assert.equal((await t.app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: `Bearer ${key}` } })).statusCode, 200);
      await t.runtime.requestLog.flush();
      assert.equal(await logged(t), 0);
    } finally {
      await t.close();
    }
  });
});

/** a request-log row of a GET /v1/models with nothing counted */
function logRow(id: string, createdAt: number, receivedAtMs: number) {
  return {
    request_id: id,
    created_at: createdAt,
    received_at_ms: receivedAtMs,
    method: 'GET',
    route: '/v1/models',
    operation: 'models',
    status: 200,
    latency_ms: 1,
    input_tokens: 0,
    output_tokens: 0,
    characters: 0,
    audio_seconds: 0,
    output_audio_seconds: 0,
    cost_micros: 0,
  };
}
