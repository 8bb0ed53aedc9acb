import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { captureLog } from '../helpers/log.js';
import { UsageService } from '../../src/portal/usage/service.js';
import { UsageStore } from '../../src/portal/usage/store.js';
import { RefusedRecords, UsageJournal } from '../../src/portal/usage/journal.js';

const key = { keyId: 'key_refused', userId: 'refused-user', orgId: 'default' };

for (const db of testDatabases()) {
  describe(`usage records the database refuses (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db });
    });
    after(() => t.close());

    test('the database itself refuses a record (NUL in text): it is set aside and logged, the others are stored', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'portico-refused-'));
      try {
        const { log, lines } = captureLog();
        const usage = new UsageService(new UsageStore(t.services.db.db), new UsageJournal(dir), { log, refused: new RefusedRecords(dir) });
        await usage.record({ requestId: 'nul-before', key, model: 'fine', operation: 'responses', costMicros: 1 });
        await usage.record({ requestId: 'nul-refused', key, model: 'bad\u0000model', operation: 'responses', costMicros: 2 });
        await usage.record({ requestId: 'nul-after', key, model: 'fine', operation: 'responses', costMicros: 3 });
        await usage.flush();
        const stored = await t.services.db.db.selectFrom('usage_records').select('request_id').where('request_id', 'like', 'nul-%').orderBy('request_id').execute();
        assert.deepEqual(
          stored.map((r) => r.request_id),
          ['nul-after', 'nul-before'],
        );
        const refused = new RefusedRecords(dir).read();
        assert.deepEqual(
          refused.map((l) => [l.record.request_id, l.record.model, l.record.cost_micros]),
          [['nul-refused', 'bad\u0000model', 2]],
        );
        assert.equal(statSync(join(dir, 'usage-refused.ndjson')).mode & 0o777, 0o600);
        const errors = lines.filter((l) => l.level === 'error');
        assert.equal(errors.length, 1, JSON.stringify(lines));
        assert.equal(errors[0]!.obj.request_id, 'nul-refused');
        // the database's own reason: a NUL as a parameter (0x00) or inside the batch's JSON (a \u0000 escape)
        assert.match(String(errors[0]!.obj.reason), /0x00|null|invalid|unicode escape/i);
        // replayed once the cause is fixed (the operator copies the `record` of each line into the journal of a
        // stopped instance): the fixed record is stored, and a record that was already stored is not doubled
        const replayDir = join(dir, 'replay');
        const replayJournal = new UsageJournal(replayDir);
        replayJournal.append({ ...refused[0]!.record, model: 'bad-model' });
        const [before] = await t.services.db.db.selectFrom('usage_records').selectAll().where('request_id', '=', 'nul-before').execute();
        const { id: _id, ...beforeRow } = before!;
        replayJournal.append(beforeRow);
        replayJournal.close();
        const replayer = new UsageService(new UsageStore(t.services.db.db), new UsageJournal(replayDir), { log, refused: new RefusedRecords(replayDir) });
        assert.equal(await replayer.recover(), 2);
        await replayer.flush();
        const all = await t.services.db.db.selectFrom('usage_records').select(['request_id', 'model']).where('request_id', 'like', 'nul-%').orderBy('request_id').execute();
        assert.deepEqual(all, [
          { request_id: 'nul-after', model: 'fine' },
          { request_id: 'nul-before', model: 'fine' },
          { request_id: 'nul-refused', model: 'bad-model' },
        ]);
        await Promise.all([usage.close(), replayer.close()]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test("the application's ledger sets refused records aside in DATA_DIR and counts them in /metrics", async () => {
      await t.services.usage.record({ requestId: 'app-refused', key, model: 'also\u0000bad', operation: 'speech', characters: 5 });
      await t.services.usage.flush();
      const refused = new RefusedRecords(t.config.dataDir).read();
      assert.ok(refused.some((l) => l.record.request_id === 'app-refused'));
      const metrics = await t.app.inject({ method: 'GET', url: '/metrics' });
      assert.match(metrics.body, /^portico_usage_records_refused_total 1$/m);
    });
  });
}
