/**
 * `portico backup` and `portico restore` of the embedded database, as an operator runs them: the real command in a
 * child process, against a real `portico serve` on the same DATA_DIR (docs/deployment.md, "Backups").
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cleanTmp, portico, startServe, tmp, type Served } from './helpers.js';
import { startScriptedUpstream } from '../helpers/scripted-upstream.js';
import { openDb } from '../../src/platform/db/index.js';
import { sql } from 'kysely';

after(cleanTmp);

const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

function modelFile(url: string): string {
  const p = join(tmp(), 'models.yaml');
  writeFileSync(p, JSON.stringify({ models: [{ name: 'up', provider: 'openai-compatible', base_url: url, type: 'text' }] }));
  return p;
}

/** a portal token of alice, signed with the JWT secret generated in (or restored into) DATA_DIR */
async function jwtFor(dataDir: string): Promise<string> {
  const r = await portico(['token', '--user', 'alice'], { DATA_DIR: dataDir });
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.trim();
}

/** the time range every usage query of the file asks for (the default ends now, which moves) */
const RANGE = `start_time=0&end_time=${Math.floor(Date.now() / 1000) + 86_400}`;

async function usageOf(url: string, jwt: string): Promise<unknown> {
  const res = await fetch(`${url}/v1/portal/query/usage?group_by=model,key&${RANGE}`, { headers: { authorization: `Bearer ${jwt}` } });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { data: unknown }).data;
}

async function chat(url: string, key: string): Promise<number> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'up', messages: [{ role: 'user', content: 'hello' }] }),
  });
  await res.arrayBuffer();
  return res.status;
}

test('a backup taken while the server runs, restored into a new DATA_DIR: the same key authenticates and the usage is there', { timeout: 400_000 }, async () => {
  const up = await startScriptedUpstream();
  const config = modelFile(up.url);
  const a = tmp();
  const file = join(tmp(), 'portico.bak');
  let server: Served | undefined;
  try {
    // no KEY_PEPPER nor JWT_SECRET: the server generates both in DATA_DIR, and the backup must carry them
    server = await startServe({ DATA_DIR: a, PORTICO_CONFIG: config });
    const jwt = await jwtFor(a);
    const made = await fetch(`${server.url}/v1/portal/api-keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'kept' }),
    });
    assert.equal(made.status, 200);
    const key = ((await made.json()) as { data: { api_key: string } }).data.api_key;
    assert.equal(await chat(server.url, key), 200);
    assert.equal(await chat(server.url, key), 200);
    const usage = await usageOf(server.url, jwt);
    assert.match(JSON.stringify(usage), /"up"/, 'the usage names the model');

    // a copy an earlier command never took, two hours old: removed by the next backup
    const stale = join(a, 'backup-1-deadbeef.tmp');
    writeFileSync(stale, 'left over');
    utimesSync(stale, new Date(Date.now() - 7_200_000), new Date(Date.now() - 7_200_000));
    const r = await portico(['backup', file], { DATA_DIR: a });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^backup written to ${file} \\(\\d+\\.\\d MiB, readable by you only\\)`));
    assert.match(r.stdout, /copied from the running server/);
    assert.match(r.stdout, /api_keys 1\b/);
    assert.match(r.stdout, /usage_records 2\b/);
    assert.match(r.stdout, /with: key-pepper, jwt-secret/);
    assert.match(r.stdout, /not included: downloaded model files/);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(
      readdirSync(a).filter((n) => n.endsWith('.tmp')),
      [],
      'the command took its copy away, and the stale one is gone',
    );
    const written = sha(file);
    const again = await portico(['backup', file], { DATA_DIR: a });
    assert.equal(again.code, 2);
    assert.match(again.stderr, /exists: give --force to replace it/);
    assert.equal(sha(file), written, 'an existing file is left alone');

    // a backup taken while requests keep writing: the copy is one moment, so the rows it counted are the rows it
    // holds (restore opens the copy and checks every table against those counts)
    let writing = true;
    let sent = 0;
    const writer = (async () => {
      while (writing) {
        assert.equal(await chat(server!.url, key), 200);
        sent++;
      }
    })();
    const busyFile = join(tmp(), 'busy.bak');
    const busy = await portico(['backup', busyFile], { DATA_DIR: a });
    writing = false;
    await writer;
    assert.equal(busy.code, 0, busy.stderr);
    const counted = Number(/usage_records (\d+)\b/.exec(busy.stdout)?.[1]);
    assert.ok(sent > 0, 'requests were answered while the backup ran');
    assert.ok(counted >= 2 && counted <= 2 + sent, `${counted} usage records counted, ${sent} requests sent during the backup`);
    const busyRestore = await portico(['restore', busyFile], { DATA_DIR: tmp() });
    assert.equal(busyRestore.code, 0, busyRestore.stderr);
    assert.match(busyRestore.stdout, new RegExp(`usage_records ${counted}\\b.*: as the backup counted them`));

    // the server holds the database: restore and migrate-data are refused, and nothing in DATA_DIR changes
    const listing = readdirSync(a).sort();
    const restoring = await portico(['restore', file], { DATA_DIR: a });
    assert.equal(restoring.code, 2);
    assert.match(
      restoring.stderr,
      /^portico: a Portico server \(process \d+\) is running on .*: stop it first; restore replaces the database it has open\. Nothing was changed\.\n$/,
    );
    const moving = await portico(['migrate-data', '--to', 'postgres://127.0.0.1:1/none'], { DATA_DIR: a });
    assert.equal(moving.code, 2);
    assert.match(moving.stderr, /a Portico server \(process \d+\) is running on .*stop it first/);
    assert.deepEqual(readdirSync(a).sort(), listing);

    // what comes after the backup is not in it (the requests above, and this one)
    assert.equal(await chat(server.url, key), 200);
    await server.stop();
    server = undefined;

    const b = tmp();
    const restored = await portico(['restore', file], { DATA_DIR: b });
    assert.equal(restored.code, 0, restored.stderr);
    assert.match(restored.stdout, /usage_records 2\b.*: as the backup counted them/);
    assert.match(restored.stdout, /with: key-pepper, jwt-secret/);
    assert.equal(sha(join(b, 'key-pepper')), sha(join(a, 'key-pepper')), 'the pepper the key digests were made with');
    assert.equal(statSync(join(b, 'key-pepper')).mode & 0o777, 0o600);

    server = await startServe({ DATA_DIR: b, PORTICO_CONFIG: config });
    const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(models.status, 200, 'the key made before the backup authenticates on the restored installation');
    assert.deepEqual(await usageOf(server.url, await jwtFor(b)), usage, 'the usage as it was when the backup was taken');
    assert.equal(await chat(server.url, key), 200);
  } finally {
    await server?.stop();
    await up.close();
  }
});

test(
  'restore refuses a missing, garbage, truncated, damaged or newer backup and changes nothing; a good one replaces the database and keeps the old one',
  { timeout: 300_000 },
  async () => {
    const c = tmp();
    assert.equal((await portico(['migrate'], { DATA_DIR: c })).code, 0);
    // what a stopped server left in its journal (not shipped yet) travels with the backup; a torn last line does not
    const journalLine = JSON.stringify({ record_id: 'rec-left', request_id: 'req-left', key_id: 'key_x', model: 'up' }) + '\n';
    writeFileSync(join(c, 'usage-journal.ndjson'), journalLine + '{"record_id":"torn', { mode: 0o600 });
    const good = join(tmp(), 'good.bak');
    const made = await portico(['backup', good], { DATA_DIR: c });
    assert.equal(made.code, 0, made.stderr);
    assert.match(made.stdout, /copied from the data directory \(no server running\)/);
    assert.match(made.stdout, /with: key-pepper, jwt-secret, usage-journal\.ndjson/);
    writeFileSync(join(c, 'usage-journal.ndjson'), '', { mode: 0o600 });

    const state = () => JSON.stringify([readdirSync(c).sort(), readdirSync(join(c, 'pglite')).sort(), sha(join(c, 'key-pepper')), sha(join(c, 'pglite', 'PG_VERSION'))]);
    const before = state();
    const refused = async (file: string, why: RegExp) => {
      const r = await portico(['restore', file], { DATA_DIR: c });
      assert.equal(r.code, 2, `${file}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, why);
      assert.equal(r.stdout, '');
      assert.equal(state(), before, `${file} changed nothing`);
    };
    const dir = tmp();
    await refused(join(dir, 'missing.bak'), /^portico: .*missing\.bak: no such file; nothing was changed\n$/);
    const garbage = join(dir, 'garbage.bak');
    writeFileSync(garbage, randomBytes(100_000));
    await refused(garbage, /^portico: .*garbage\.bak is not a Portico backup \(made by `portico backup`\); nothing was changed\n$/);
    const bytes = readFileSync(good);
    const truncated = join(dir, 'truncated.bak');
    writeFileSync(truncated, bytes.subarray(0, bytes.length - 4096));
    await refused(truncated, /truncated\.bak is truncated: .* the file ends \d+ bytes short; nothing was changed/);
    const damaged = join(dir, 'damaged.bak');
    const flipped = Buffer.from(bytes);
    flipped[flipped.length >> 1] ^= 0xff;
    writeFileSync(damaged, flipped);
    await refused(damaged, /damaged\.bak is damaged: pglite\.tar\.gz does not match its SHA-256; nothing was changed/);

    // a backup of a database a newer release migrated (a migration this release does not know)
    const d = tmp();
    assert.equal((await portico(['migrate'], { DATA_DIR: d })).code, 0);
    const db = await openDb({ dataDir: d });
    await sql`insert into portico_migrations (name, timestamp) values ('9999_from_a_newer_release', ${new Date().toISOString()})`.execute(db.db);
    await db.close();
    const newer = join(dir, 'newer.bak');
    // KEY_PEPPER in the environment: the pepper file is not what the installation uses, and is left out (and said so)
    const newerMade = await portico(['backup', newer], { DATA_DIR: d, KEY_PEPPER: 'a-pepper-of-the-environment-0123456789abcdef' });
    assert.equal(newerMade.code, 0, newerMade.stderr);
    assert.match(
      newerMade.stdout,
      /\n {2}with: jwt-secret\n {2}note: KEY_PEPPER is set in the environment: it is not in the backup; a restored installation needs the same KEY_PEPPER\n/,
    );
    await refused(
      newer,
      /newer\.bak was made by a newer Portico .*1 migration this release does not know \(9999_from_a_newer_release\)\. Restore it with that release or a newer one\.; nothing was changed/,
    );

    // PostgreSQL: the documented commands instead, and a non-zero exit
    const pgBackup = await portico(['backup', join(dir, 'pg.bak')], { DATA_DIR: c, DATABASE_URL: 'postgres://127.0.0.1:1/portico' });
    assert.equal(pgBackup.code, 2);
    assert.match(pgBackup.stderr, /DATABASE_URL is set.*\n {2}pg_dump --format=custom --no-owner --file=portico\.dump "\$DATABASE_URL"\n/);
    assert.equal(existsSync(join(dir, 'pg.bak')), false);
    const pgRestore = await portico(['restore', good], { DATA_DIR: c, DATABASE_URL: 'postgres://127.0.0.1:1/portico' });
    assert.equal(pgRestore.code, 2);
    assert.match(pgRestore.stderr, /pg_restore --clean --if-exists --no-owner --single-transaction --dbname="\$DATABASE_URL" portico\.dump/);
    assert.equal(state(), before);

    // a good one over an existing database: the old one is moved aside, the new one opens
    const ok = await portico(['restore', good], { DATA_DIR: c });
    assert.equal(ok.code, 0, ok.stderr);
    const aside = readdirSync(c).find((n) => n.startsWith('before-restore-'));
    assert.ok(aside, `the replaced database is kept: ${readdirSync(c).join(', ')}`);
    assert.match(ok.stdout, new RegExp(`moved to ${join(c, aside)}: delete it once the restore is checked`));
    assert.deepEqual(readdirSync(join(c, aside)).sort(), ['jwt-secret', 'key-pepper', 'pglite', 'usage-journal.ndjson']);
    assert.equal(readFileSync(join(c, 'usage-journal.ndjson'), 'utf8'), journalLine, 'the journal of the backup, shipped at the next start');
    assert.equal(existsSync(join(c, 'pglite', 'PG_VERSION')), true);
    const opens = await portico(['migrate', '--dry-run'], { DATA_DIR: c });
    assert.equal(opens.code, 0, opens.stderr);
    assert.equal(opens.stdout, 'no pending migrations\n');
  },
);
