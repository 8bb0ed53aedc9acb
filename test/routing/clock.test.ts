import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Router } from '../../src/models/router/index.js';
import { ModelRegistry } from '../../src/models/registry.js';
import type { EngineRegistry } from '../../src/engines/registry.js';
import type { ModelSpec } from '../../src/models/config.js';
import { EngineError } from '../../src/engines/types.js';

/**
 * The router waits for an upstream's retry-after on the monotonic clock (a timer) and reads the time as whole
 * wall-clock milliseconds: after the wait, the clock may read one short of the time waited for. A request that
 * waited out the retry-after must then go to the deployment, not be refused as "at its rate limit" (a refusal that
 * named the deployment "available", seen under load in test/chat/completions.errors.test.ts).
 */
test('a request that waited out a retry-after is served even when the clock reads a millisecond short after the wait', async () => {
  let clock = 1_000_000;
  const slept: number[] = [];
  const spec = { name: 'm', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text', retries: 0 } as ModelSpec;
  const router = new Router({
    engines: {} as EngineRegistry,
    models: new ModelRegistry([spec]),
    now: () => clock,
    // the timer fires after `ms`, but the wall clock shows one millisecond less
    sleep: async (ms) => {
      slept.push(ms);
      clock += ms - 1;
    },
  });
  const calls: string[] = [];
  // the upstream answers 429 with retry-after 2 s
  await assert.rejects(
    router.first(spec, undefined, undefined, async (dep) => {
      calls.push(dep.id);
      throw new EngineError('slow down', 'rate_limit_exceeded', 429, { retryable: true, retryAfterMs: 2000 });
    }),
    (e: EngineError) => e.status === 429 && /slow down/.test(e.message),
  );
  // the next request comes 500 ms later: it waits 1500 ms, then is tried (not refused)
  clock += 500;
  const lease = await router.first(spec, undefined, undefined, async (dep) => {
    calls.push(dep.id);
    return 'answer';
  });
  assert.deepEqual(slept, [1500]);
  assert.equal(calls.length, 2, 'the second request reached the deployment');
  assert.equal(lease.value, 'answer');
  lease.end(true);
});
