// The engine registry (src/engines/registry.ts): loading the providers' code at start, creating nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Type } from 'typebox';
import { EngineRegistry } from '../../src/engines/registry.js';
import { defineProvider, type Provider, type ProviderContext } from '../../src/engines/provider.js';

const ctx: ProviderContext = { env: {}, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } };

test('preload loads the code of each provider and capability the models use, once, deployments included; it creates no engine and a failed load is left to the first request', async () => {
  const loaded: string[] = [];
  const created: string[] = [];
  const provider = (name: string, load?: Provider['load']) =>
    defineProvider({
      name,
      summary: name,
      serves: ['text', 'embeddings'],
      options: Type.Object({}),
      load,
      create: {
        text: async () => {
          created.push(name);
          throw new Error('not in this test');
        },
      },
    });
  const registry = new EngineRegistry(
    new Map<string, Provider>([
      ['up', provider('up', { text: async () => loaded.push('up/text'), embeddings: async () => loaded.push('up/embeddings') })],
      ['broken', provider('broken', { text: () => Promise.reject(new Error('cannot load')) })],
      ['plain', provider('plain')],
    ]),
    ctx,
  );
  await registry.preload([
    { name: 'a', provider: 'up', type: 'text' },
    { name: 'b', provider: 'up', type: 'text' },
    { name: 'routed', provider: 'plain', type: 'embeddings', deployments: [{ name: 'routed#1', provider: 'up', type: 'embeddings' }] },
    { name: 'c', provider: 'broken', type: 'text' },
    { name: 'd', provider: 'plain', type: 'text' },
    { name: 'e', provider: 'unknown', type: 'text' },
  ]);
  assert.deepEqual(loaded.sort(), ['up/embeddings', 'up/text']);
  assert.deepEqual(created, []);
});

test('entries whose provider gives the same engine key share one engine (a model under two names loads once); it closes when the last name goes', async () => {
  const made: string[] = [];
  const closed: string[] = [];
  const files = defineProvider({
    name: 'files',
    summary: 'an engine per file',
    serves: ['text'],
    options: Type.Object({ path: Type.String(), size: Type.Optional(Type.Integer()) }),
    engineKey: (s, capability) => JSON.stringify([capability, s.path, s.size ?? null]),
    create: {
      text: async (s) => {
        const tag = `${s.path}#${made.length}`;
        made.push(tag);
        return { generate: () => (async function* () {})(), close: async () => void closed.push(tag) } as never;
      },
    },
  });
  const registry = new EngineRegistry(new Map<string, Provider>([['files', files]]), ctx);
  const spec = (name: string, path: string, size?: number) => ({ name, provider: 'files', type: 'text' as const, path, ...(size ? { size } : {}) });
  // two names for one file, asked for at once and later: one engine
  const [a, b] = await Promise.all([registry.text(spec('qwen-0.5b', '/m/qwen.gguf')), registry.text(spec('qwen', '/m/qwen.gguf'))]);
  assert.equal(a, b);
  assert.equal(await registry.text(spec('qwen', '/m/qwen.gguf')), a);
  // another file, or the same file loaded otherwise: an engine of its own
  const c = await registry.text(spec('other', '/m/other.gguf'));
  const d = await registry.text(spec('qwen-big', '/m/qwen.gguf', 4096));
  assert.notEqual(c, a);
  assert.notEqual(d, a);
  assert.deepEqual(made, ['/m/qwen.gguf#0', '/m/other.gguf#1', '/m/qwen.gguf#2']);
  // one name goes (a reload removed it): the engine stays for the other
  await registry.release('qwen-0.5b');
  assert.deepEqual(closed, []);
  assert.equal(await registry.text(spec('qwen', '/m/qwen.gguf')), a);
  // the last one goes: it closes; the other engines stay
  await registry.retire(['qwen']);
  assert.deepEqual(closed, ['/m/qwen.gguf#0']);
  assert.equal(await registry.text(spec('other', '/m/other.gguf')), c);
  // asked for again: made anew
  assert.notEqual(await registry.text(spec('qwen', '/m/qwen.gguf')), a);
  assert.equal(made.length, 4);
  await registry.close();
});

test("llama's engine key: the same file with the same options is one engine; another context window, parallel or capability is not", async () => {
  const { llama } = await import('../../src/engines/llama/provider.js');
  const key = (s: Record<string, unknown>, c: 'text' | 'embeddings' = 'text') => llama.engineKey!({ name: String(s.name), provider: 'llama', type: c, ...s } as never, c);
  assert.equal(key({ name: 'a', path: '/m/q.gguf' }), key({ name: 'b', path: '/m/q.gguf' }));
  assert.equal(key({ name: 'a', path: '/m/q.gguf', context_window: 2048 }), key({ name: 'b', path: '/m/q.gguf', context_window: 2048 }));
  assert.notEqual(key({ name: 'a', path: '/m/q.gguf' }), key({ name: 'a', path: '/m/q.gguf', context_window: 2048 }));
  assert.notEqual(key({ name: 'a', path: '/m/q.gguf' }), key({ name: 'a', path: '/m/q.gguf', parallel: 4 }));
  assert.notEqual(key({ name: 'a', path: '/m/q.gguf' }), key({ name: 'a', path: '/m/r.gguf' }));
  assert.notEqual(key({ name: 'a', path: '/m/q.gguf' }, 'text'), key({ name: 'a', path: '/m/q.gguf' }, 'embeddings'));
});
