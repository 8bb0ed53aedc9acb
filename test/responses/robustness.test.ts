import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setup, MODEL, type Env } from './util.js';
import { waitFor } from '../helpers/wait.js';

describe('responses: what a client cannot escape or break', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  const usageRows = async () => {
    await e.t.services.usage.flush();
    return e.t.services.db.db.selectFrom('usage_records').selectAll().where('user_id', '=', 'alice').execute();
  };

  test('a client that leaves mid-stream is charged for what it was sent', async () => {
    const before = (await usageRows()).length;
    e.up.script({ text: Array.from({ length: 100 }, (_, i) => `token${i} `), delayMs: 20 });
    const ac = new AbortController();
    const res = await fetch(e.url + '/v1/responses', {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${e.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream: true, input: 'long answer please' }),
    });
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while ((text.match(/output_text\.delta/g) ?? []).length < 5) text += dec.decode((await reader.read()).value, { stream: true });
    ac.abort();
    let rows = await usageRows();
    await waitFor(async () => (rows = await usageRows()).length !== before, { what: 'the usage record of the abandoned stream' });
    assert.equal(rows.length, before + 1, 'one usage record for the abandoned stream');
    const row = rows[rows.length - 1];
    assert.ok(row.output_tokens > 0, `output charged (${row.output_tokens})`);
    assert.ok(row.input_tokens > 0, `input charged (${row.input_tokens})`);
  });

  test('text that jsonb cannot hold (lone surrogates, NUL from the model) is stored, not a 500', async () => {
    e.up.script({ text: 'model said \u0000 something \ud800 odd' });
    const res = await e.call('POST', '/v1/responses', '{"model":"' + MODEL + '","input":"hi \\ud800 there","metadata":{"k":"\\udfff"}}');
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as any;
    const got = await e.client.responses.retrieve(body.id);
    assert.equal(got.status, 'completed');
    assert.ok(!got.output_text.includes('\u0000'));
    const items = await e.client.responses.inputItems.list(body.id);
    assert.match(JSON.stringify(items.data), /hi .* there/);
  });
});

describe('background: a cancel of a job still waiting for a slot', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite', [], { BACKGROUND_CONCURRENCY: '1' });
  });
  after(() => e.close());

  test('is cancelled at once, and the job never runs', async () => {
    e.up.script({ text: Array.from({ length: 40 }, (_, i) => `a${i} `), delayMs: 50 }, { text: 'B ran' });
    const a = await e.client.responses.create({ model: MODEL, input: 'slow A', background: true });
    const b = await e.client.responses.create({ model: MODEL, input: 'waiting B', background: true });
    // A holds the only slot (its answer takes 2 s): B waits for it
    const upA = await waitFor(() => e.up.requests.find((r) => JSON.stringify(r.body).includes('slow A')), { what: 'A to run' });
    const cancelled = await e.client.responses.cancel(b.id);
    assert.equal(cancelled.status, 'cancelled');
    // at once: the cancel did not wait for the slot, A still runs (an ordering, not a clock)
    assert.equal((await e.client.responses.retrieve(a.id)).status, 'in_progress', 'the cancel of B waited for A to finish');
    await e.client.responses.cancel(a.id);
    // the slot is free once A's upstream request closed: had B still been queued, it would start now
    await upA.closed;
    // a short pause proving a negative: B does not start
    await new Promise((r) => setTimeout(r, 100));
    const bNow = await e.client.responses.retrieve(b.id);
    assert.equal(bNow.status, 'cancelled');
    assert.equal(bNow.output.length, 0);
    assert.ok(!e.up.requests.some((r) => JSON.stringify(r.body).includes('waiting B')), 'B never reached the upstream');
  });
});
