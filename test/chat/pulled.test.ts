/**
 * What a newcomer does (issue 12, "done when"): `portico models pull` a chat GGUF and an embedding GGUF (from a
 * local server that answers like the Hugging Face hub) while Portico runs, then a Responses call, a Chat
 * Completions call and an embeddings call with the official SDK, with no restart and no model file.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FakeHub } from '../helpers/fake-hub.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import { makeTinyEmbeddingGguf } from '../helpers/tiny-embedding-gguf.js';
import { portico } from '../cli/helpers.js';
import { setupChat, type ChatEnv } from './helpers.js';

describe('pulled models answer Responses, Chat Completions and embeddings at once', () => {
  let hub: FakeHub;
  let e: ChatEnv;
  let modelsDir: string;
  before(async () => {
    hub = await new FakeHub().start();
    hub.addRepo({ owner: 'acme', repo: 'Tiny-Chat-GGUF', files: [{ path: 'tiny-chat-Q4_K_M.gguf', data: readFileSync(await makeTinyGguf()) }] });
    hub.addRepo({ owner: 'acme', repo: 'Tiny-Embed-GGUF', files: [{ path: 'tiny-embed-F32.gguf', data: readFileSync(await makeTinyEmbeddingGguf()) }] });
    modelsDir = mkdtempSync(join(tmpdir(), 'portico-pulled-chat-'));
    e = await setupChat({ env: { MODELS_DIR: modelsDir } });
  });
  after(async () => {
    await e.close();
    await hub.close();
    rmSync(modelsDir, { recursive: true, force: true });
  });

  const listed = async (id: string) => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const m = (await e.client.models.list()).data.find((x) => x.id === id) as any;
      if (m || Date.now() > deadline) return m;
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  test('pull a chat model and an embedding model, then call all three endpoints', async () => {
    const env = { MODELS_DIR: modelsDir, PORTICO_HF_ENDPOINT: hub.url, DATA_DIR: modelsDir };
    const chatPull = await portico(['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--name', 'tiny'], env);
    assert.equal(chatPull.code, 0, chatPull.stderr);
    const embedPull = await portico(['models', 'pull', 'hf:acme/Tiny-Embed-GGUF', '--name', 'embedder'], env);
    assert.equal(embedPull.code, 0, embedPull.stderr);
    assert.match(embedPull.stdout, /\(embedding,/, 'recognized as an embedding model (BERT architecture)');
    assert.equal((await listed('tiny'))?.type, 'text');
    assert.equal((await listed('embedder'))?.type, 'embeddings');

    const r = await e.client.responses.create({ model: 'tiny', input: 'Say hi', max_output_tokens: 4 });
    assert.ok(r.output_text.length > 0);
    // the file's other name (the one the pull gave it) is the same model in memory: one engine, the file loaded once
    const names = (await e.client.models.list()).data
      .map((m) => m.id)
      .filter(
        (id) =>
          id !== 'tiny' &&
          e.t.services.models.get(id)?.provider === 'llama' &&
          (e.t.services.models.get(id) as { path?: string }).path === (e.t.services.models.get('tiny') as { path?: string }).path,
      );
    assert.equal(names.length, 1, `one other name for the chat file: ${names.join(', ')}`);
    const other = await e.client.responses.create({ model: names[0]!, input: 'Say hi', max_output_tokens: 4 });
    assert.ok(other.output_text.length > 0);
    assert.equal(await e.t.services.engines.text(e.t.services.models.get(names[0]!)!), await e.t.services.engines.text(e.t.services.models.get('tiny')!));
    const c = await e.client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 4 });
    assert.ok(c.choices[0]!.message.content!.length > 0);
    assert.equal(c.model, 'tiny');
    const v = await e.client.embeddings.create({ model: 'embedder', input: ['hello world', 'the quick brown fox'] });
    assert.equal(v.data.length, 2);
    assert.equal(v.data[0]!.embedding.length, 32);

    // each model only where it belongs
    assert.equal((await e.call('POST', '/v1/chat/completions', { model: 'embedder', messages: [{ role: 'user', content: 'hi' }] })).status, 404);
    assert.equal((await e.call('POST', '/v1/embeddings', { model: 'tiny', input: 'hi' })).status, 404);
    const rows = await e.usage('alice');
    for (const op of ['responses', 'chat.completions', 'embeddings'])
      assert.ok(
        rows.some((x) => x.operation === op),
        op,
      );
  });
});
