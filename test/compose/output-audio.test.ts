/**
 * Audio seconds produced (the ledger's `output_audio_seconds`), end to end through a feature that meters them as a
 * feature would (a test module declaring the unit, as the Realtime API is to): Metering.charge prices them by the
 * model's pricing key and records them in their own column beside the seconds taken in, the request's facts carry
 * them to its log line (`audio_seconds_out`) and its request-log row, and the query APIs (the user's, the
 * operators', the CSV) give them. A count that is no count (negative) is recorded as 0 and charges nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { Type } from 'typebox';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { callers, type Callers } from '../admin/helpers.js';
import { parseModelConfig } from '../../src/models/config.js';
import type { FeatureModule, MeteredUnit } from '../../src/platform/module.js';
import type { FeatureDeps } from '../../src/compose/runtime.js';
import { resolveModel } from '../../src/api/metering.js';

/** what the Realtime API declares; here a test feature's */
const OUTPUT_AUDIO: MeteredUnit = { unit: 'output_audio_seconds', price: 'per_output_audio_second', on: ['text'] };

/** POST /v1/voicebox/say {model, heard, spoken}: charges the seconds heard and spoken, as a turn of a spoken conversation */
function voicebox(d: FeatureDeps): FeatureModule {
  return {
    name: 'voicebox',
    scope: 'voicebox',
    operations: ['voicebox'],
    units: [OUTPUT_AUDIO],
    routes: {
      api: (app) => {
        app.withTypeProvider<TypeBoxTypeProvider>().post(
          '/voicebox/say',
          {
            config: { scope: 'voicebox' },
            schema: { body: Type.Object({ model: Type.String(), heard: Type.Number(), spoken: Type.Number() }, { additionalProperties: false }) },
          },
          async (req) => {
            const spec = resolveModel(d.models, req.body.model, 'text', req.apiKey!, req.facts);
            await d.metering.charge({
              requestId: req.id,
              key: req.apiKey!,
              spec,
              operation: 'voicebox',
              used: { inputTokens: 4, outputTokens: 6, units: { audio_seconds: req.body.heard, output_audio_seconds: req.body.spoken } },
              facts: req.facts,
            });
            return { ok: true };
          },
        );
      },
    },
  };
}

describe('audio seconds produced: charged, recorded in their own column, logged, and listed by the query APIs', () => {
  let t: TestApp;
  let who: Callers;
  let key: string;
  const raw: string[] = [];
  const requestLine = (reqId: string) => {
    const found = raw.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.reqId === reqId && l.msg === 'request');
    assert.equal(found.length, 1, `one request line for ${reqId}`);
    return found[0]!;
  };
  const say = (body: object, id: string) =>
    t.app.inject({ method: 'POST', url: '/v1/voicebox/say', headers: { authorization: `Bearer ${key}`, 'x-request-id': id }, payload: body });

  before(async () => {
    const models = parseModelConfig(
      [
        'models:',
        // never called: the test feature charges without an engine
        '  - { name: voice-1, type: text, provider: openai-compatible, base_url: "http://127.0.0.1:9", pricing: { per_output_audio_second: 0.01 } }',
        '',
      ].join('\n'),
      'models.yaml',
      { units: [OUTPUT_AUDIO] },
    ).models;
    const sink = new Writable({ write: (c, _e, cb) => (raw.push(...c.toString().split('\n').filter(Boolean)), cb()) });
    t = await buildTestApp({ models, logDestination: sink, env: { LOG_LEVEL: 'info' }, runtime: { extraModules: [voicebox] } });
    who = await callers(t);
    key = await t.inferenceKey('vera');
  });
  after(() => t?.close());

  test('one turn: the ledger row, its price, the log line, the request-log row', async () => {
    const res = await say({ model: 'voice-1', heard: 1.5, spoken: 2.5 }, 'req_voice_1');
    assert.equal(res.statusCode, 200, res.body);
    await t.services.usage.flush();
    const rows = await t.services.db.db.selectFrom('usage_records').selectAll().where('request_id', '=', 'req_voice_1').execute();
    assert.equal(rows.length, 1);
    const r = rows[0]!;
    assert.deepEqual([r.operation, Number(r.input_tokens), Number(r.output_tokens), r.audio_seconds, r.output_audio_seconds], ['voicebox', 4, 6, 1.5, 2.5]);
    // 2.5 s x 0.01 credits (the seconds heard have no price on this model: counted, not charged)
    assert.equal(Number(r.cost_micros), 25_000);

    const line = requestLine('req_voice_1');
    assert.equal(line.audio_seconds, 1.5);
    assert.equal(line.audio_seconds_out, 2.5);
    assert.equal(line.tokens_out, 6);

    await t.runtime.requestLog.flush();
    const logged = await t.services.db.db
      .selectFrom('request_log')
      .select(['audio_seconds', 'output_audio_seconds', 'cost_micros', 'operation'])
      .where('request_id', '=', 'req_voice_1')
      .execute();
    assert.deepEqual(
      logged.map((l) => [l.operation, l.audio_seconds, l.output_audio_seconds, Number(l.cost_micros)]),
      [['voicebox', 1.5, 2.5, 25_000]],
    );
  });

  test("a count that is no count (negative) is recorded as 0, charges nothing, and leaves the line's field out", async () => {
    const res = await say({ model: 'voice-1', heard: 0, spoken: -3 }, 'req_voice_neg');
    assert.equal(res.statusCode, 200, res.body);
    await t.services.usage.flush();
    const r = await t.services.db.db.selectFrom('usage_records').selectAll().where('request_id', '=', 'req_voice_neg').executeTakeFirstOrThrow();
    assert.equal(r.output_audio_seconds, 0);
    assert.equal(Number(r.cost_micros), 0);
    assert.equal(requestLine('req_voice_neg').audio_seconds_out, undefined);
  });

  test("the user's usage, the operators' usage and requests, and the CSV give the seconds produced", async () => {
    await say({ model: 'voice-1', heard: 0.25, spoken: 0.75 }, 'req_voice_2');
    const token = await t.token('vera');
    for (const group of ['model', 'day,key', 'operation']) {
      const own = await t.app.inject({ method: 'GET', url: `/v1/portal/query/usage?group_by=${group}`, headers: { authorization: `Bearer ${token}` } });
      assert.equal(own.statusCode, 200, own.body);
      const d = own.json().data;
      assert.equal(d.total.output_audio_seconds, 3.25, group);
      assert.equal(d.total.audio_seconds, 1.75, group);
      assert.deepEqual(
        d.list.map((x: any) => x.output_audio_seconds),
        [3.25],
        group,
      );
    }
    const admin = await t.app.inject({ method: 'GET', url: '/v1/admin/usage?group_by=user,model', headers: who.operator });
    assert.equal(admin.statusCode, 200, admin.body);
    assert.deepEqual(
      admin.json().data.list.map((x: any) => [x.user_id, x.model, x.output_audio_seconds]),
      [['vera', 'voice-1', 3.25]],
    );
    const one = await t.app.inject({ method: 'GET', url: '/v1/admin/requests/req_voice_2', headers: who.operator });
    assert.equal(one.statusCode, 200, one.body);
    assert.deepEqual([one.json().data.request.audio_seconds, one.json().data.request.output_audio_seconds], [0.25, 0.75]);
    const csv = await t.app.inject({ method: 'GET', url: '/v1/admin/requests.csv?request_id=req_voice_1', headers: who.operator });
    assert.equal(csv.statusCode, 200, csv.body);
    const [head, row] = csv.body.trimEnd().split('\r\n');
    const cells = Object.fromEntries(head!.split(',').map((c, i) => [c, row!.split(',')[i]]));
    assert.equal(cells.audio_seconds, '1.5');
    assert.equal(cells.output_audio_seconds, '2.5');
    assert.equal(cells.cost, '0.025');
  });
});
