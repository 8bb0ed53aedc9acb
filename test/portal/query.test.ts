import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { MGMT, assertOk, assertPortalError, caller, expireInDb, nowS, type Caller } from './util.js';

const USAGE = '/v1/portal/query/usage';
const BALANCE = '/v1/portal/query/balance';
const DAY = 86400;

for (const db of testDatabases()) {
  describe(`query APIs: usage and balance (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    let alice: string;
    const keys: Record<string, { id: string; api_key: string }> = {};
    let aliceSk1: string;
    let aliceSk2: string;
    /** when the records were made (s): the days asserted are this one's, also when a test runs after midnight */
    let recordedAt: number;
    before(async () => {
      t = await buildTestApp({ db });
      recordedAt = nowS();
      call = caller(t);
      alice = await t.token('alice');
      keys.all = assertOk(await call('POST', MGMT, alice, { name: 'all' }));
      keys.usage = assertOk(await call('POST', MGMT, alice, { name: 'usage', scopes: ['usage:read'] }));
      keys.balance = assertOk(await call('POST', MGMT, alice, { name: 'balance', scopes: ['balance:read'] }));
      aliceSk1 = 'key_alice_1';
      aliceSk2 = 'key_alice_2';
      const rec = (requestId: string, keyId: string, userId: string, orgId: string, model: string, input: number, output: number, costMicros: number) =>
        t.services.usage.record({ requestId, key: { keyId, userId, orgId }, model, operation: 'responses', inputTokens: input, outputTokens: output, costMicros });
      // alice, personal: 3 records today on two models and two keys
      await rec('r1', aliceSk1, 'alice', 'default', 'm1', 10, 5, 1_000_000);
      await rec('r2', aliceSk1, 'alice', 'default', 'm2', 20, 10, 500_000);
      await rec('r3', aliceSk2, 'alice', 'default', 'm1', 1, 1, 250_000);
      // alice, personal: one record moved 3 days back
      await rec('old', aliceSk2, 'alice', 'default', 'm1', 100, 100, 2_000_000);
      // records reach the table from the usage journal in batches: ship them before editing the table
      await t.services.usage.flush();
      await t.services.db.db
        .updateTable('usage_records')
        .set({ created_at: recordedAt - 3 * DAY })
        .where('request_id', '=', 'old')
        .execute();
      // today's three in the same second (and day) as recordedAt, whenever the clock turned while they were made
      await t.services.db.db.updateTable('usage_records').set({ created_at: recordedAt }).where('request_id', 'in', ['r1', 'r2', 'r3']).execute();
      // bob, personal, and the acme org (dave and carol)
      await rec('b1', 'key_bob', 'bob', 'default', 'm1', 7, 7, 3_000_000);
      await rec('a1', 'key_dave', 'dave', 'acme', 'm1', 1000, 1, 100_000);
      await rec('a2', 'key_carol', 'carol', 'acme', 'm2', 2000, 2, 200_000);
      await t.services.usage.grant('alice', 'default', 10);
      await t.services.usage.grant('bob', 'default', 1);
      await t.services.usage.grant('', 'acme', 50);
    });
    after(() => t.close());

    test('a Management API Key without scopes calls both', async () => {
      const u = assertOk(await call('GET', USAGE, keys.all.api_key));
      assert.equal(u.total.requests, 4);
      assert.equal(u.total.input_tokens, 131);
      assert.equal(u.total.cost, 3.75);
      const b = assertOk(await call('GET', BALANCE, keys.all.api_key));
      assert.deepEqual(b, { granted: 10, used: 3.75, balance: 6.25, currency: 'credits', billing_enabled: false });
    });

    test('scopes: usage:read only -> 403 on balance; balance:read only -> 403 on usage', async () => {
      assertOk(await call('GET', USAGE, keys.usage.api_key));
      assertPortalError(await call('GET', BALANCE, keys.usage.api_key), 403, /^permission denied.*balance:read/, 40301);
      assertOk(await call('GET', BALANCE, keys.balance.api_key));
      assertPortalError(await call('GET', USAGE, keys.balance.api_key), 403, /^permission denied.*usage:read/, 40301);
    });

    test('a portal JWT works too, personal scope by default', async () => {
      assert.equal(assertOk(await call('GET', USAGE, alice)).total.requests, 4);
      assert.equal(assertOk(await call('GET', BALANCE, alice)).balance, 6.25);
      const bob = await t.token('bob');
      assert.deepEqual(assertOk(await call('GET', BALANCE, bob)), { granted: 1, used: 3, balance: -2, currency: 'credits', billing_enabled: false });
      assert.equal(assertOk(await call('GET', USAGE, bob)).total.requests, 1);
      // an org needs its admin
      assertPortalError(await call('GET', `${USAGE}?org_id=acme`, bob), 403, /^permission denied/, 40300);
      const carol = await t.token('carol', { acme: 'admin' });
      const org = assertOk(await call('GET', `${USAGE}?org_id=acme`, carol));
      assert.equal(org.total.requests, 2);
      assert.equal(assertOk(await call('GET', `${BALANCE}?org_id=acme`, carol)).balance, 49.7);
      // no auth / bad auth
      assertPortalError(await call('GET', USAGE), 401, 'unauthorized', 40100);
      assertPortalError(await call('GET', BALANCE, undefined, undefined, { authorization: 'Basic x' }), 401, 'unauthorized: invalid authorization format', 40101);
    });

    test("org scoping: an org key sees the org; a personal key sees only its owner's personal records", async () => {
      const carol = await t.token('carol', { acme: 'admin' });
      const orgKey = assertOk(await call('POST', MGMT, carol, { name: 'acme reporting', org_id: 'acme' }));
      const u = assertOk(await call('GET', `${USAGE}?group_by=key`, orgKey.api_key));
      assert.deepEqual(u.list.map((r: any) => r.key_id).sort(), ['key_carol', 'key_dave']);
      assert.equal(assertOk(await call('GET', BALANCE, orgKey.api_key)).granted, 50);
      // an org key asking for another org -> 403
      assertPortalError(await call('GET', `${USAGE}?org_id=default`, orgKey.api_key), 403, /^permission denied/, 40300);
      // dave's personal key sees none of the org's records, nor alice's
      const dave = await t.token('dave', { acme: 'member' });
      const daveKey = assertOk(await call('POST', MGMT, dave, { name: 'mine' }));
      const du = assertOk(await call('GET', USAGE, daveKey.api_key));
      assert.equal(du.total.requests, 0);
      assert.deepEqual(du.list, []);
      assertPortalError(await call('GET', `${USAGE}?org_id=acme`, daveKey.api_key), 403, /^permission denied/);
      // alice's personal key sees only alice's
      const au = assertOk(await call('GET', `${USAGE}?group_by=key`, keys.all.api_key));
      assert.deepEqual(au.list.map((r: any) => r.key_id).sort(), [aliceSk1, aliceSk2]);
    });

    test('grouping by day, model and key, and time ranges', async () => {
      const byModel = assertOk(await call('GET', `${USAGE}?group_by=model`, alice));
      assert.deepEqual(byModel.group_by, ['model']);
      assert.deepEqual(
        byModel.list.map((r: any) => [r.model, r.requests, r.input_tokens, r.output_tokens, r.cost]),
        [
          ['m1', 3, 111, 106, 3.25],
          ['m2', 1, 20, 10, 0.5],
        ],
      );
      const byDay = assertOk(await call('GET', `${USAGE}?group_by=day`, alice));
      assert.equal(byDay.list.length, 2);
      const today = new Date(recordedAt * 1000).toISOString().slice(0, 10);
      const then = new Date((recordedAt - 3 * DAY) * 1000).toISOString().slice(0, 10);
      assert.deepEqual(
        byDay.list.map((r: any) => [r.date, r.requests]),
        [
          [then, 1],
          [today, 3],
        ],
      );
      const byKey = assertOk(await call('GET', `${USAGE}?group_by=key`, alice));
      assert.deepEqual(
        byKey.list.map((r: any) => [r.key_id, r.requests]),
        [
          [aliceSk1, 2],
          [aliceSk2, 2],
        ],
      );
      // ids that name no key (records written here by hand): no name
      assert.deepEqual(
        byKey.list.map((r: any) => [r.key_name, r.key_deleted]),
        [
          [null, false],
          [null, false],
        ],
      );
      // grouped by key (and day and model, as the page asks), each row names its key as it is now; a deleted key
      // is still named and says so; other groupings carry no key columns
      const sk = assertOk(await call('POST', '/v1/portal/api-keys', alice, { name: 'laptop' }));
      const gone = assertOk(await call('POST', '/v1/portal/api-keys', alice, { name: 'old script' }));
      await t.services.usage.record({
        requestId: 'k1',
        key: { keyId: sk.id, userId: 'alice', orgId: 'default' },
        model: 'm1',
        operation: 'responses',
        inputTokens: 3,
        outputTokens: 4,
        costMicros: 10,
      });
      await t.services.usage.record({
        requestId: 'k2',
        key: { keyId: gone.id, userId: 'alice', orgId: 'default' },
        model: 'm2',
        operation: 'responses',
        inputTokens: 5,
        outputTokens: 6,
        costMicros: 20,
      });
      assertOk(await call('DELETE', `/v1/portal/api-keys/${gone.id}`, alice));
      assertOk(await call('PUT', `/v1/portal/api-keys/${sk.id}`, alice, { name: 'work laptop' }));
      const named = assertOk(await call('GET', `${USAGE}?group_by=day,model,key&start_time=${nowS() - DAY}`, alice));
      assert.deepEqual(named.group_by, ['day', 'model', 'key']);
      const mine = named.list.filter((r: any) => r.key_id === sk.id || r.key_id === gone.id).map((r: any) => [r.model, r.key_name, r.key_deleted, r.requests, r.input_tokens]);
      assert.deepEqual(mine, [
        ['m1', 'work laptop', false, 1, 3],
        ['m2', 'old script', true, 1, 5],
      ]);
      for (const r of named.list) assert.ok(r.date && r.model && r.key_id, 'every group column is there');
      assert.equal(named.total.requests, 5);
      for (const r of assertOk(await call('GET', `${USAGE}?group_by=model`, alice)).list) assert.ok(!('key_name' in r) && !('key_id' in r));
      await t.services.db.db.deleteFrom('usage_records').where('request_id', 'in', ['k1', 'k2']).execute();
      // default grouping: day and model
      const def = assertOk(await call('GET', USAGE, alice));
      assert.deepEqual(def.group_by, ['day', 'model']);
      assert.equal(def.list.length, 3);
      for (const r of def.list) assert.ok(r.date && r.model);
      // a range of the last day excludes the old record
      const recent = assertOk(await call('GET', `${USAGE}?start_time=${nowS() - DAY}`, alice));
      assert.equal(recent.total.requests, 3);
      // a range ending two days ago holds only the old record
      const old = assertOk(await call('GET', `${USAGE}?start_time=${nowS() - 10 * DAY}&end_time=${nowS() - 2 * DAY}&group_by=model`, alice));
      assert.deepEqual(
        old.list.map((r: any) => [r.model, r.requests]),
        [['m1', 1]],
      );
      assert.equal(old.total.cost, 2);
      // a range that holds nothing
      assert.equal(assertOk(await call('GET', `${USAGE}?start_time=1&end_time=1000`, alice)).total.requests, 0);
      // one key's records
      assert.equal(assertOk(await call('GET', `${USAGE}?key_id=${aliceSk1}`, alice)).total.requests, 2);
      // bad parameters
      assertPortalError(await call('GET', `${USAGE}?start_time=100&end_time=100`, alice), 400, /start_time/, 40000);
      assertPortalError(await call('GET', `${USAGE}?group_by=user`, alice), 400, /group_by/, 40000);
      assertPortalError(await call('GET', `${USAGE}?start_time=abc`, alice), 400, /start_time/, 40000);
      assertPortalError(await call('GET', `${USAGE}?bogus=1`, alice), 400, /bogus/, 40000);
    });

    test('a revoked, expired, disabled or deleted Management API Key -> 401', async () => {
      const mk = assertOk(await call('POST', MGMT, alice, { name: 'to revoke' }));
      assertOk(await call('GET', USAGE, mk.api_key));
      assertOk(await call('POST', `${MGMT}/revoke`, alice, { api_key_id: mk.id }));
      assertPortalError(await call('GET', USAGE, mk.api_key), 401, /revoked/, 40105);
      assertPortalError(await call('GET', BALANCE, mk.api_key), 401, /revoked/, 40105);
      assertOk(await call('POST', `${MGMT}/restore`, alice, { api_key_id: mk.id }));
      assertOk(await call('GET', BALANCE, mk.api_key));
      await t.services.managementKeys.setDisabled(mk.id, true);
      assertPortalError(await call('GET', USAGE, mk.api_key), 401, /disabled/, 40107);
      await t.services.managementKeys.setDisabled(mk.id, false);
      assertOk(await call('DELETE', `${MGMT}/${mk.id}`, alice));
      assertPortalError(await call('GET', USAGE, mk.api_key), 401, /^unauthorized/, 40104);

      const exp = assertOk(await call('POST', MGMT, alice, { name: 'to expire', expires_at: nowS() + 3600 }));
      await expireInDb(t, exp.id);
      assertPortalError(await call('GET', USAGE, exp.api_key), 401, /expired/, 40106);
      assertPortalError(await call('GET', BALANCE, exp.api_key), 401, /expired/, 40106);
      // an inference key is not a Management API Key
      const sk = await t.inferenceKey('alice');
      assertPortalError(await call('GET', USAGE, sk), 401, /Management API Key/, 40104);
    });

    test('using a Management API Key sets its last_used_at', async () => {
      const list = assertOk(await call('GET', MGMT, alice)).list;
      const all = list.find((k: any) => k.id === keys.all.id);
      assert.ok(all.last_used_at > 0);
    });
  });
}
