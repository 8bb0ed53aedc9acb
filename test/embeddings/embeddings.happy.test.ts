/**
 * POST /v1/embeddings through the official SDK: forwarded to an upstream that has it (texts, arrays, token
 * arrays, `dimensions`, `user`; floats, and base64 which the SDK asks for by default and decodes), and on the
 * embedded llama engine with a generated BERT GGUF (configured in the model file; pulled: test/chat/pulled.test.ts):
 * unit-length vectors, one per input, reproducible, base64 equal to the floats, Matryoshka `dimensions`.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { scriptedEmbedding } from '../helpers/scripted-upstream.js';
import { makeTinyEmbeddingGguf } from '../helpers/tiny-embedding-gguf.js';
import { parseModelConfig } from '../../src/models/config.js';
import { EMBED, setupChat, type ChatEnv } from '../chat/helpers.js';

const f32 = (v: number[]) => Array.from(Float32Array.from(v));
const norm = (v: number[]) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i]!, 0);

describe('embeddings forwarded to an upstream (SDK)', () => {
  let e: ChatEnv;
  before(async () => {
    e = await setupChat();
  });
  after(() => e.close());

  test('floats: the request forwarded (model mapped, floats asked), the vectors as the upstream gave them, usage recorded and priced', async () => {
    const r = await e.client.embeddings.create({ model: EMBED, input: ['hello world', 'second text'], encoding_format: 'float', user: 'u-1' });
    assert.deepEqual(e.last(), { model: 'upstream-embedder', input: ['hello world', 'second text'], encoding_format: 'float', user: 'u-1' });
    assert.equal(e.up.requests[e.up.requests.length - 1]!.path, '/v1/embeddings');
    assert.equal(r.object, 'list');
    assert.equal(r.model, EMBED);
    assert.deepEqual(
      r.data.map((d) => [d.object, d.index]),
      [
        ['embedding', 0],
        ['embedding', 1],
      ],
    );
    assert.deepEqual(r.data[0]!.embedding, scriptedEmbedding('hello world'));
    assert.deepEqual(r.data[1]!.embedding, scriptedEmbedding('second text'));
    // 'hello world' 11 characters -> 3 tokens, 'second text' -> 3
    assert.deepEqual(r.usage, { prompt_tokens: 6, total_tokens: 6 });
    const row = (await e.usage('alice')).find((x) => x.operation === 'embeddings');
    assert.equal(row!.model, EMBED);
    assert.equal(row!.input_tokens, 6);
    assert.equal(row!.cost, 0.000006);
  });

  test('base64: the SDK default (it asks for base64 and decodes); the raw answer is little-endian float32', async () => {
    const r = await e.client.embeddings.create({ model: EMBED, input: 'hello world' });
    assert.equal(e.last().encoding_format, 'float', 'Portico asks the upstream for floats and encodes itself');
    assert.deepEqual(r.data[0]!.embedding, f32(scriptedEmbedding('hello world')));
    const raw = (await (await e.call('POST', '/v1/embeddings', { model: EMBED, input: 'hello world', encoding_format: 'base64' })).json()) as any;
    assert.equal(typeof raw.data[0].embedding, 'string');
    const buf = Buffer.from(raw.data[0].embedding, 'base64');
    assert.equal(buf.length, 8 * 4);
    assert.deepEqual(
      Array.from({ length: 8 }, (_, i) => buf.readFloatLE(i * 4)),
      f32(scriptedEmbedding('hello world')),
    );
  });

  test('token arrays and dimensions are forwarded (inputs as the list of inputs: one token array is a list of one)', async () => {
    const a = await e.client.embeddings.create({ model: EMBED, input: [1, 2, 3], encoding_format: 'float' });
    assert.deepEqual(e.last().input, [[1, 2, 3]]);
    assert.deepEqual(a.data[0]!.embedding, scriptedEmbedding('1,2,3'));
    assert.equal(a.usage.prompt_tokens, 3);
    const b = await e.client.embeddings.create({ model: EMBED, input: [[5, 6], [7]], encoding_format: 'float', dimensions: 4 });
    assert.deepEqual(e.last().input, [[5, 6], [7]]);
    assert.equal(e.last().dimensions, 4);
    assert.deepEqual(
      b.data.map((d) => d.embedding),
      [scriptedEmbedding('5,6', 4), scriptedEmbedding('7', 4)],
    );
  });

  test('a dated model name the upstream reports is not passed on: the answer names the model the client sent', async () => {
    e.up.script({ model: 'upstream-embedder-v2' });
    const r = await e.client.embeddings.create({ model: EMBED, input: 'x', encoding_format: 'float' });
    assert.equal(r.model, EMBED);
  });
});

describe('embeddings on the llama engine (a generated BERT GGUF)', () => {
  let e: ChatEnv;
  before(async () => {
    const path = await makeTinyEmbeddingGguf();
    // as the model file says it: type embeddings, provider llama
    const { models } = parseModelConfig(
      [
        'models:',
        '  - name: tiny-embed',
        '    provider: llama',
        '    type: embeddings',
        `    path: ${path}`,
        '  - name: tiny-mrl',
        '    provider: llama',
        '    type: embeddings',
        `    path: ${path}`,
        '    matryoshka: true',
        '    pricing: { input_per_million: 1 }',
      ].join('\n'),
    );
    e = await setupChat({ extra: models });
  });
  after(() => e.close());

  test('one unit-length vector per input, the same text the same vector, different texts different vectors; exact token usage', async () => {
    const r = await e.client.embeddings.create({ model: 'tiny-embed', input: ['the cat sat on the mat', 'hello world', 'the cat sat on the mat'], encoding_format: 'float' });
    assert.equal(r.model, 'tiny-embed');
    assert.equal(r.data.length, 3);
    for (const d of r.data) {
      assert.equal(d.embedding.length, 32);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-6, 'unit length');
    }
    assert.deepEqual(r.data[0]!.embedding, r.data[2]!.embedding);
    assert.ok(dot(r.data[0]!.embedding, r.data[1]!.embedding) < 0.999, 'different texts, different vectors');
    // WordPiece: 6 words + [CLS] + [SEP], 2 words + 2
    assert.deepEqual(r.usage, { prompt_tokens: 8 + 4 + 8, total_tokens: 20 });
    const again = await e.client.embeddings.create({ model: 'tiny-embed', input: 'hello world', encoding_format: 'float' });
    assert.deepEqual(again.data[0]!.embedding, r.data[1]!.embedding, 'reproducible across requests');
  });

  test('base64 (the SDK default) decodes to the float vector', async () => {
    const floats = await e.client.embeddings.create({ model: 'tiny-embed', input: 'hello world', encoding_format: 'float' });
    const b64 = await e.client.embeddings.create({ model: 'tiny-embed', input: 'hello world' });
    assert.deepEqual(b64.data[0]!.embedding, f32(floats.data[0]!.embedding));
  });

  test('token arrays: the ids of the model vocabulary (here: "hello world" tokenized with [CLS] and [SEP])', async () => {
    const text = await e.client.embeddings.create({ model: 'tiny-embed', input: 'hello world', encoding_format: 'float' });
    // the generated vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], then the words of its text in order: "hello" is 21, "world" 22
    const ids = await e.client.embeddings.create({ model: 'tiny-embed', input: [2, 21, 22, 3], encoding_format: 'float' });
    assert.equal(ids.usage.prompt_tokens, 4);
    assert.deepEqual(ids.data[0]!.embedding, text.data[0]!.embedding, 'the same tokens, the same vector');
  });

  test('dimensions: the native size always; fewer on a Matryoshka model (cut, then unit length again)', async () => {
    const same = await e.client.embeddings.create({ model: 'tiny-embed', input: 'hello', encoding_format: 'float', dimensions: 32 });
    assert.equal(same.data[0]!.embedding.length, 32);
    const full = await e.client.embeddings.create({ model: 'tiny-mrl', input: 'hello', encoding_format: 'float' });
    const cut = await e.client.embeddings.create({ model: 'tiny-mrl', input: 'hello', encoding_format: 'float', dimensions: 8 });
    const v = cut.data[0]!.embedding;
    assert.equal(v.length, 8);
    assert.ok(Math.abs(norm(v) - 1) < 1e-6);
    const prefix = full.data[0]!.embedding.slice(0, 8);
    const scale = norm(prefix);
    prefix.forEach((x, i) => assert.ok(Math.abs(x / scale - v[i]!) < 1e-6, 'the prefix of the full vector, normalized'));
    const row = (await e.usage('alice')).find((x) => x.operation === 'embeddings' && x.model === 'tiny-mrl');
    assert.equal(row!.requests, 2);
  });

  test('the model is listed with its type and engine', async () => {
    const m = (await e.client.models.list()).data.find((x) => x.id === 'tiny-embed') as any;
    assert.equal(m.type, 'embeddings');
    assert.equal(m.engine, 'llama');
  });
});
