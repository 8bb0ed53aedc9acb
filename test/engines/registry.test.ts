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
