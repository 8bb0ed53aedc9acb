// The response store (src/responses/store.ts) on each database: input items read back one row per item, the
// response's own columns once; a chain, a response without items and one with thousands of items.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { syncBuiltinESMExports } from 'node:module';
import threads from 'node:worker_threads';
import { sql } from 'kysely';
import { openDb, type OpenedDb } from '../../src/platform/db/index.js';
import { migrations } from '../../src/platform/db/migrations.js';
import { ResponseStore, type StoredResponse } from '../../src/responses/store.js';
import type { StoredItem } from '../../src/responses/input.js';
import type { ResponseObject } from '../../src/responses/object.js';
import { TEST_PG_URL, testDatabases } from '../helpers/app.js';

const object = (id: string, previous: string | null): ResponseObject =>
  ({ id, object: 'response', model: 'm', status: 'completed', background: false, previous_response_id: previous, created_at: 1, output: [] }) as unknown as ResponseObject;
const items = (n: number, tag: string): StoredItem[] =>
  Array.from({ length: n }, (_, i) => ({
    id: `msg_${tag}${i}`,
    type: 'message',
    role: i % 2 ? 'assistant' : 'user',
    content: [{ type: 'input_text', text: `${tag}${i} ` + 'q'.repeat(1000) }],
  }));
const stored = (id: string, previous: string | null, inputItems: StoredItem[]): StoredResponse => ({
  id,
  userId: 'u1',
  orgId: 'o1',
  keyId: 'k1',
  object: object(id, previous),
  inputItems,
  request: id === 'resp_c' ? { model: 'm', input: 'kept' } : undefined,
});

for (const db of testDatabases()) {
  describe(`response store (${db})`, () => {
    let dir: string;
    let opened: OpenedDb;
    let store: ResponseStore;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'portico-store-'));
      opened = await openDb(
        db === 'postgres' ? { dataDir: dir, databaseUrl: TEST_PG_URL, schema: `t_store_${randomBytes(4).toString('hex')}`, poolSize: 2 } : { dataDir: dir, inMemory: true },
      );
      await opened.migrate();
      store = new ResponseStore(opened.db);
      await store.insert(stored('resp_a', null, []));
      await store.insert(stored('resp_b', 'resp_a', items(3, 'b')));
      await store.insert(stored('resp_c', 'resp_b', items(3000, 'c')));
    });
    after(async () => {
      if (db === 'postgres') {
        const s = (await sql<{ s: string }>`select current_schema() as s`.execute(opened.db)).rows[0]!.s;
        await sql`drop schema ${sql.id(s)} cascade`.execute(opened.db);
      }
      await opened.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test('a chain comes back oldest first with each response, its items in order (none, a few, thousands)', async () => {
      const original = threads.receiveMessageOnPort;
      let reads = 0;
      threads.receiveMessageOnPort = (port) => {
        reads++;
        return original(port);
      };
      syncBuiltinESMExports();
      let chain: Awaited<ReturnType<ResponseStore['chain']>>;
      try {
        chain = await store.chain('resp_c', 'u1');
      } finally {
        threads.receiveMessageOnPort = original;
        syncBuiltinESMExports();
      }
      assert.deepEqual(
        chain.map((c) => [c.id, c.object.id, c.object.previous_response_id, c.inputItems.length]),
        [
          ['resp_a', 'resp_a', null, 0],
          ['resp_b', 'resp_b', 'resp_a', 3],
          ['resp_c', 'resp_c', 'resp_b', 3000],
        ],
      );
      assert.deepEqual(chain[1]!.inputItems, items(3, 'b'));
      assert.deepEqual(chain[2]!.inputItems, items(3000, 'c'));
      // PGlite's thread sent the ~3 MB of rows in batches, read one per turn
      if (db === 'pglite') assert.ok(reads >= 4, `${reads} batches read`);
      assert.deepEqual(await store.chain('resp_a', 'u1'), [{ id: 'resp_a', object: object('resp_a', null), inputItems: [] }]);
      assert.deepEqual(await store.chain('resp_c', 'someone else'), []);
    });

    test('a background job waits as queued in the row while its object says in_progress; claim takes it once', async () => {
      const waiting = { ...stored('resp_bg', null, []), object: { ...object('resp_bg', null), status: 'in_progress', background: true } as ResponseObject, job: 'queued' as const };
      await store.insert(waiting);
      const got = await store.getAny('resp_bg');
      assert.equal(got?.job, 'queued');
      assert.equal(got?.object.status, 'in_progress');
      assert.equal(await store.claim('resp_bg', 'runner-1'), true);
      assert.equal(await store.claim('resp_bg', 'runner-2'), false, 'taken once');
      const claimed = await store.getAny('resp_bg');
      assert.equal(claimed?.job, 'in_progress');
      assert.equal(claimed?.object.status, 'in_progress');
    });

    test("migration 0008: objects and events stored as 'queued' before say in_progress; response.queued becomes response.in_progress", async () => {
      const old = { ...object('resp_old', null), status: 'queued', background: true } as unknown as ResponseObject;
      await store.insert({ ...stored('resp_old', null, []), object: old, job: 'queued' }, [
        { type: 'response.created', sequence_number: 0, response: old },
        { type: 'response.queued', sequence_number: 1, response: old },
      ]);
      const done = { ...object('resp_done', null), background: true } as ResponseObject;
      await store.insert({ ...stored('resp_done', null, []), object: done }, [
        { type: 'response.created', sequence_number: 0, response: { ...done, status: 'queued' } },
        { type: 'response.queued', sequence_number: 1, response: { ...done, status: 'queued' } },
        { type: 'response.in_progress', sequence_number: 2, response: { ...done, status: 'in_progress' } },
        { type: 'response.completed', sequence_number: 3, response: done },
      ]);
      await opened.db.transaction().execute((tx) => migrations['0008_background_in_progress']!.up(tx));
      const r = await store.getAny('resp_old');
      assert.equal(r?.object.status, 'in_progress');
      assert.equal(r?.job, 'queued', 'the job still waits for a worker');
      assert.deepEqual(
        (await store.events('resp_old', -1)).map((e) => [e.sequence_number, e.type, (e.response as ResponseObject).status]),
        [
          [0, 'response.created', 'in_progress'],
          [1, 'response.in_progress', 'in_progress'],
        ],
      );
      assert.deepEqual(
        (await store.events('resp_done', -1)).map((e) => [e.sequence_number, e.type, (e.response as ResponseObject).status]),
        [
          [0, 'response.created', 'in_progress'],
          [1, 'response.in_progress', 'in_progress'],
          [2, 'response.in_progress', 'in_progress'],
          [3, 'response.completed', 'completed'],
        ],
      );
      assert.equal((await store.getAny('resp_done'))?.object.status, 'completed');
    });

    test('get and getAny: the response, its items and its request; nothing for another user or a deleted one', async () => {
      const c = await store.get('resp_c', 'u1');
      assert.deepEqual(c, { ...stored('resp_c', 'resp_b', items(3000, 'c')), job: 'completed' });
      assert.deepEqual(await store.getAny('resp_a'), { ...stored('resp_a', null, []), request: null, job: 'completed' });
      assert.equal(await store.get('resp_c', 'u2'), undefined);
      assert.equal(await store.get('resp_nope', 'u1'), undefined);
      assert.equal(await store.softDelete('resp_b', 'u1'), true);
      assert.equal(await store.getAny('resp_b'), undefined);
      assert.deepEqual(
        (await store.chain('resp_c', 'u1')).map((x) => x.id),
        ['resp_c'],
      );
    });
  });
}
