/**
 * The router's stream (src/models/router, RoutedStream): the tries run once, on the first read; items then pass
 * through in order. A second read made while the tries run waits for them instead of starting a second call, and
 * a reader that leaves during the tries gets nothing and closes what the try opened.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Router } from '../../src/models/router/index.js';
import type { EngineRegistry } from '../../src/engines/registry.js';
import type { ModelRegistry } from '../../src/models/registry.js';
import type { ModelSpec } from '../../src/models/spec.js';
import type { GenerateEvent, TextEngine } from '../../src/engines/types.js';

/** an engine whose answer is `events`, each call counted; `gate` holds its first event back until it resolves */
function fakeEngine(events: GenerateEvent[], gate: Promise<void>) {
  const state = { calls: 0, returned: 0 };
  const engine = {
    kind: 'fake',
    generate() {
      state.calls++;
      return (async function* () {
        try {
          await gate;
          yield* events;
        } finally {
          state.returned++;
        }
      })();
    },
    countTokens: async () => 1,
    close: async () => {},
  } as unknown as TextEngine;
  return { engine, state };
}

function routerFor(engine: TextEngine) {
  const engines = { text: async () => engine } as unknown as EngineRegistry;
  const models = { get: () => undefined } as unknown as ModelRegistry;
  return new Router({ engines, models });
}

const spec = { name: 'm', provider: 'fake', type: 'text' } as unknown as ModelSpec;
const events: GenerateEvent[] = [
  { type: 'text_delta', delta: 'hi' },
  { type: 'done', finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 } },
] as GenerateEvent[];

describe('the router stream', () => {
  test('two reads made while the tries run: one call, the items in order, then the end', async () => {
    let open!: () => void;
    const { engine, state } = fakeEngine(events, new Promise<void>((r) => (open = r)));
    const routed = await routerFor(engine).text(spec);
    const it = routed.generate({ model: 'm', messages: [] } as never)[Symbol.asyncIterator]();
    const first = it.next();
    const second = it.next();
    open();
    assert.deepEqual((await first).value, events[0]);
    assert.deepEqual((await second).value, events[1]);
    assert.equal((await it.next()).done, true);
    assert.equal(state.calls, 1, 'one engine call');
  });

  test('a reader that leaves while the tries run gets the end, and what the try opened is closed', async () => {
    let open!: () => void;
    const { engine, state } = fakeEngine(events, new Promise<void>((r) => (open = r)));
    const routed = await routerFor(engine).text(spec);
    const it = routed.generate({ model: 'm', messages: [] } as never)[Symbol.asyncIterator]();
    const first = it.next();
    await it.return!();
    open();
    assert.equal((await first).done, true);
    // the engine's stream is closed once its first item came (its generator's finally ran)
    for (let i = 0; i < 100 && state.returned === 0; i++) await new Promise<void>((r) => setImmediate(r));
    assert.equal(state.returned, 1);
    assert.equal((await it.next()).done, true);
  });
});
