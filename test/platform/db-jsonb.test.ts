// jsonb values for SQL (src/platform/db/jsonb.ts): a large value's text goes as bytes made in slices, and is stored
// exactly as its JSON.stringify text would be, on every driver: PGlite on its thread (the bytes moved to it), PGlite
// on this thread, PostgreSQL (jsonb's binary format).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { openDb, type OpenedDb } from '../../src/platform/db/index.js';
import { JsonbText, jsonb } from '../../src/platform/db/jsonb.js';
import { LARGE_JSON_CHARS } from '../../src/platform/json-text.js';
import { TEST_PG_URL, testDatabases } from '../helpers/app.js';

/** past the size made in slices: several slices, every kind of JSON value, escapes and characters of every UTF-8 length */
const LARGE = {
  items: Array.from({ length: 300 }, (_, i) => ({ i, text: `${i} ` + 'é中😀"\\\n'.repeat(400) + 'x'.repeat(4000), ok: i % 2 === 0, none: null, n: i / 7 })),
};
const replacer = (_k: string, v: unknown) => (typeof v === 'string' ? v.replace(/x/g, 'y') : v);

const drivers: Array<{ name: string; open: (dir: string) => Promise<OpenedDb> }> = [
  { name: 'PGlite on its thread', open: (dataDir) => openDb({ dataDir, inMemory: true }) },
  { name: 'PGlite on this thread', open: (dataDir) => openDb({ dataDir, inMemory: true, thread: false }) },
  ...(testDatabases().includes('postgres')
    ? [{ name: 'PostgreSQL', open: (dataDir: string) => openDb({ dataDir, databaseUrl: TEST_PG_URL, schema: `t_jsonb_${randomBytes(4).toString('hex')}`, poolSize: 2 }) }]
    : []),
];

for (const d of drivers) {
  describe(`jsonb values (${d.name})`, () => {
    let dir: string;
    let opened: OpenedDb;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'portico-jsonb-'));
      opened = await d.open(dir);
      await sql`create table docs (id text primary key, doc jsonb)`.execute(opened.db);
    });
    after(async () => {
      if (d.name === 'PostgreSQL')
        await sql`drop schema ${sql.id(String((await sql<{ s: string }>`select current_schema() as s`.execute(opened.db)).rows[0]!.s))} cascade`.execute(opened.db);
      await opened.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test('a large value is stored as its JSON.stringify text would be (with a replacer too); a small one is that text', async () => {
      const db = opened.db;
      assert.ok(JSON.stringify(LARGE).length > 2 * LARGE_JSON_CHARS);
      const large = jsonb(LARGE, replacer);
      assert.ok(large instanceof Promise, 'a large value is made in slices');
      const small = jsonb({ a: 'x' }, replacer);
      assert.ok(!(small instanceof Promise), 'a small value is made at once');
      await sql`insert into docs values ('sliced', ${await large}), ('whole', ${JSON.stringify(LARGE, replacer)}::jsonb), ('small', ${small})`.execute(db);
      const same = await sql<{ same: boolean }>`select (select doc from docs where id = 'sliced') = (select doc from docs where id = 'whole') as same`.execute(db);
      assert.equal(same.rows[0]!.same, true);
      const rows = await sql<{ id: string; doc: unknown }>`select id, doc from docs order by id`.execute(db);
      assert.deepEqual(rows.rows.find((r) => r.id === 'sliced')!.doc, JSON.parse(JSON.stringify(LARGE, replacer)));
      assert.deepEqual(rows.rows.find((r) => r.id === 'small')!.doc, { a: 'y' });
      // an update through the same value kind
      await sql`update docs set doc = ${await jsonb({ ...LARGE, more: true })} where id = 'small'`.execute(db);
      const more = await sql<{ more: boolean }>`select doc->'more' as more from docs where id = 'small'`.execute(db);
      assert.equal(more.rows[0]!.more, true);
    });

    if (d.name === 'PGlite on its thread') {
      test("the bytes are moved to the database's thread, not copied", async () => {
        const value = await jsonb(LARGE);
        const found = findJsonbText(value.toOperationNode());
        assert.ok(found, 'the value carries its bytes');
        assert.ok(found.json.buffer.byteLength > LARGE_JSON_CHARS);
        await sql`insert into docs values ('moved', ${value})`.execute(opened.db);
        assert.equal(found.json.buffer.byteLength, 0, 'detached here once sent');
        const stored = await sql<{ doc: unknown }>`select doc from docs where id = 'moved'`.execute(opened.db);
        assert.deepEqual(stored.rows[0]!.doc, LARGE);
      });
    }

    if (d.name === 'PostgreSQL') {
      test("toPostgres gives jsonb's binary format: version 1, then the text", async () => {
        const value = await jsonb(LARGE);
        const found = findJsonbText(value.toOperationNode());
        assert.ok(found);
        const wire = found.toPostgres();
        assert.equal(wire[0], 1);
        assert.equal(wire.subarray(1).toString('utf8'), JSON.stringify(LARGE));
      });
    }
  });
}

function findJsonbText(node: unknown): JsonbText | undefined {
  if (node instanceof JsonbText) return node;
  if (node === null || typeof node !== 'object') return undefined;
  for (const v of Object.values(node)) {
    const f = findJsonbText(v);
    if (f) return f;
  }
  return undefined;
}
