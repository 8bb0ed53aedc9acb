// Two Portico processes with BILLING_ENABLED=true on one PostgreSQL and one Redis, and `portico credits grant`
// as a process of its own: the grant is seen by both instances at their next request, every charge on one is
// seen by the other, and the spend stays exactly the ledger's.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, createResponse, type Cluster, type Instance } from '../helpers/cluster.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';

describe('budgets across two instances and the credits command', () => {
  let up: ScriptedUpstream;
  let c: Cluster;
  let a: Instance;
  let b: Instance;

  before(async () => {
    // 3 + 2 tokens at 100,000 credits per million: 0.5 credits a request
    up = await startScriptedUpstream({ record: false, defaultReply: { text: 'ok', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    c = await startCluster({
      upstreamUrl: up.url,
      env: { BILLING_ENABLED: 'true' },
      models: [{ name: 'paid', pricing: { input_per_million: 100_000, output_per_million: 100_000 } }],
    });
    [a, b] = c.instances;
  });
  after(async () => {
    await c?.close();
    await up?.close();
  });

  test('refused everywhere, granted by the command, spent across both instances, refused again', async () => {
    const { key } = await c.createKey(a, 'payer');
    // each request reserves 1 credit at admission ('hi': 8 input tokens estimated + max_output_tokens 2) and is charged 0.5
    const ask = (inst: Instance) => createResponse(inst.url, key, { model: 'paid', input: 'hi', max_output_tokens: 2 });
    for (const inst of [a, b]) {
      const r = await ask(inst);
      assert.equal(r.status, 429, JSON.stringify(r.body));
      assert.equal(r.body.error.code, 'insufficient_quota');
    }
    const granted = await c.cli(['credits', 'grant', '--user', 'payer', '--amount', '2']);
    assert.equal(granted.code, 0, granted.stderr);
    assert.match(granted.stdout, /balance 2/);
    // no waiting: the command raised the entry's version in Redis before it exited
    assert.equal((await ask(b)).status, 200);
    assert.equal((await ask(a)).status, 200);
    assert.equal((await ask(b)).status, 200);
    // the records reach PostgreSQL from the instances' journals within moments
    const used = async () => Number((await c.query<{ used: string }>('select coalesce(sum(cost_micros), 0) as used from usage_records where user_id = $1', ['payer']))[0]!.used);
    const deadline = Date.now() + 5000;
    while ((await used()) < 1_500_000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await used(), 1_500_000);
    // 1.5 credits spent on two instances, 0.5 left (less than a request reserves): refused on both. Asked once the records are in the ledger: a charge
    // counts in Redis at once only when it reaches the entry the instance saw (one that timed out under load, or
    // met a reset entry, counts when its record reaches the ledger), and an answer let through here would spend
    // more than the 1.5 credits asserted above
    for (const inst of [a, b]) assert.equal((await ask(inst)).status, 429);
    assert.equal(await used(), 1_500_000);
  });
});
