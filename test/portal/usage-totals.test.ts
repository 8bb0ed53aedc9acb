import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';
import { assertOk, caller, type Caller } from './util.js';

const USAGE = '/v1/portal/query/usage';

for (const db of testDatabases()) {
  describe(`usage totals are exact decimals (${db})`, () => {
    let t: TestApp;
    let call: Caller;
    let token: string;
    before(async () => {
      t = await buildTestApp({ db });
      call = caller(t);
      token = await t.token('floaty');
      const key = { keyId: 'key_floaty', userId: 'floaty', orgId: 'default' };
      // three groups of 0.024 credits: added as floats they give 0.07200000000000001; 0.1 + 0.2 audio
      // seconds (taken in, and produced) give 0.30000000000000004
      for (const [i, model] of ['a', 'b', 'c'].entries()) {
        await t.services.usage.record({ requestId: `f${i}`, key, model, operation: 'responses', costMicros: 24_000, outputAudioSeconds: [0.1, 0.2, 0][i] });
      }
      await t.services.usage.record({ requestId: 'f3', key, model: 'a', operation: 'transcription', audioSeconds: 0.1 });
      await t.services.usage.record({ requestId: 'f4', key, model: 'b', operation: 'transcription', audioSeconds: 0.2 });
    });
    after(() => t.close());

    test('the total of groups is summed in micro-credits and divided once', async () => {
      const u = assertOk(await call('GET', `${USAGE}?group_by=model`, token));
      assert.deepEqual(
        u.list.map((r: any) => [r.model, r.cost]),
        [
          ['a', 0.024],
          ['b', 0.024],
          ['c', 0.024],
        ],
      );
      // the naive sum of the listed figures is not 0.072: the total must not be that sum
      assert.notEqual(
        u.list.reduce((s: number, r: any) => s + r.cost, 0),
        0.072,
      );
      assert.equal(u.total.cost, 0.072);
      assert.equal(u.total.audio_seconds, 0.3);
      assert.equal(u.total.output_audio_seconds, 0.3);
      assert.deepEqual(
        u.list.map((r: any) => [r.model, r.audio_seconds, r.output_audio_seconds]),
        [
          ['a', 0.1, 0.1],
          ['b', 0.2, 0.2],
          ['c', 0, 0],
        ],
      );
      assert.equal(u.total.requests, 5);
    });

    test('grouped by day and model, and by operation: the same exact total', async () => {
      const byDay = assertOk(await call('GET', `${USAGE}?group_by=day,model`, token));
      assert.equal(byDay.total.cost, 0.072);
      assert.equal(byDay.total.output_audio_seconds, 0.3);
      const byKey = assertOk(await call('GET', `${USAGE}?group_by=key`, token));
      assert.deepEqual(
        byKey.list.map((r: any) => [r.key_id, r.audio_seconds, r.output_audio_seconds]),
        [['key_floaty', 0.3, 0.3]],
      );
      const byOp = assertOk(await call('GET', `${USAGE}?group_by=operation`, token));
      assert.deepEqual(
        byOp.list.map((r: any) => [r.operation, r.cost, r.audio_seconds, r.output_audio_seconds]),
        [
          ['responses', 0.072, 0, 0.3],
          ['transcription', 0, 0.3, 0],
        ],
      );
      assert.equal(byOp.total.cost, 0.072);
    });
  });
}
