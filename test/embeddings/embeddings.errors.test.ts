/**
 * POST /v1/embeddings refuses bad input of every kind with a clear 4xx in OpenAI's error shape, before the
 * engine runs; the engines' own refusals (dimensions a model does not have, an input longer than it takes, a
 * token outside its vocabulary) name the parameter; upstream failures get the right statuses.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { makeTinyEmbeddingGguf } from '../helpers/tiny-embedding-gguf.js';
import type { ModelSpec } from '../../src/models/config.js';
import { parseModelConfig, ModelConfigError } from '../../src/models/config.js';
import { EMBED, MODEL, expectError, setupChat, type ChatEnv } from '../chat/helpers.js';

describe('embeddings: bad input', () => {
  let e: ChatEnv;
  before(async () => {
    const path = await makeTinyEmbeddingGguf();
    e = await setupChat({ extra: [{ name: 'tiny-embed', provider: 'llama', type: 'embeddings', path } as ModelSpec] });
  });
  after(() => e.close());
  const post = (body: unknown) => e.call('POST', '/v1/embeddings', body);

  test('schema and input rules, with OpenAI codes and the parameter named; nothing reaches the upstream', async () => {
    const cases: Array<[unknown, number, string | undefined, string | null | undefined, RegExp?]> = [
      [{ input: 'x' }, 400, 'missing_required_parameter', 'model'],
      [{ model: EMBED }, 400, 'missing_required_parameter', 'input'],
      [{ model: EMBED, input: 'x', foo: 1 }, 400, 'unknown_parameter', 'foo'],
      [{ model: EMBED, input: '' }, 400, 'invalid_value', 'input', /empty string/],
      [{ model: EMBED, input: [] }, 400, 'array_below_min_length', 'input', /at least 1/],
      [{ model: EMBED, input: ['a', ''] }, 400, 'invalid_value', 'input[1]', /empty string/],
      [{ model: EMBED, input: [[1], []] }, 400, 'invalid_value', 'input[1]', /empty token array/],
      [{ model: EMBED, input: ['a', 1] }, 400, 'invalid_type', 'input[1]'],
      [{ model: EMBED, input: [1.5] }, 400, 'invalid_type', 'input[0]', /expected a string, an integer or an array/],
      [{ model: EMBED, input: [-1] }, 400, undefined, 'input[0]'],
      [{ model: EMBED, input: { text: 'x' } }, 400, 'invalid_type', 'input'],
      [{ model: EMBED, input: null }, 400, 'invalid_type', 'input'],
      [{ model: EMBED, input: Array.from({ length: 2049 }, () => 'x') }, 400, 'array_above_max_length', 'input', /at most 2048 inputs, but got 2049/],
      [{ model: EMBED, input: Array.from({ length: 2049 }, () => [1]) }, 400, 'array_above_max_length', 'input', /at most 2048/],
      [{ model: EMBED, input: 'x', encoding_format: 'int8' }, 400, 'invalid_value', 'encoding_format', /'float', 'base64'/],
      [{ model: EMBED, input: 'x', dimensions: 0 }, 400, 'integer_below_min_value', 'dimensions'],
      [{ model: EMBED, input: 'x', dimensions: '8' }, 400, 'invalid_type', 'dimensions'],
      [{ model: EMBED, input: 'x', dimensions: 1e300 }, 400, 'integer_above_max_value', 'dimensions', /<= 65536/],
      [{ model: 'nope', input: 'x' }, 404, 'model_not_found', 'model', /embed-test/],
      [{ model: MODEL, input: 'x' }, 404, 'model_not_found', 'model', /not a embeddings model|is not a/],
      ['{"model":', 400, 'invalid_json', null],
      [{ model: EMBED, input: 'a\u0000b' }, 400, 'validation_error', null],
    ];
    for (const [body, status, code, param, message] of cases) {
      const err = await expectError(await post(body), status, code, param);
      if (message) assert.match(err.message, message);
    }
    await expectError(await post({ model: EMBED, input: 'x'.repeat(17 * 1024 * 1024) }), 413, 'payload_too_large');
    assert.equal(e.up.requests.length, 0);
  });

  test("the llama engine's refusals: dimensions it cannot give, an input longer than it takes, a token outside its vocabulary", async () => {
    const d = await expectError(await post({ model: 'tiny-embed', input: 'x', dimensions: 8 }), 400, 'invalid_value', 'dimensions');
    assert.match(d.message, /32 dimensions and cannot shorten them/);
    const long = await expectError(await post({ model: 'tiny-embed', input: ['short', 'the cat '.repeat(100)] }), 400, 'context_length_exceeded', 'input');
    assert.match(long.message, /input\[1\] is \d+ tokens, more than this model takes/);
    const tok = await expectError(await post({ model: 'tiny-embed', input: [[2, 99999, 3]] }), 400, 'invalid_value', 'input');
    assert.match(tok.message, /token 99999 is not in this model's vocabulary/);
    // nothing was charged for refused requests
    assert.equal((await e.usage('alice')).filter((r) => r.operation === 'embeddings').length, 0);
  });

  test('upstream failures: its refusal (400, message kept), unreachable (502), no answer in time (504), an unreadable answer (502)', async () => {
    e.up.script({ noDimensions: true });
    const a = await expectError(await post({ model: EMBED, input: 'x', dimensions: 4 }), 400, 'validation_error', 'dimensions');
    assert.match(a.message, /does not support specifying dimensions/);
    await expectError(await post({ model: 'down-embed', input: 'x' }), 502, 'upstream_unavailable');
    e.up.script({ hang: true });
    await expectError(await post({ model: 'slow-embed', input: 'x' }), 504, 'upstream_timeout');
    e.up.script({ raw: ['{"data": "nope"}'], headers: { 'content-type': 'application/json' } });
    const u = await expectError(await post({ model: EMBED, input: 'x' }), 502);
    assert.match(u.message, /unreadable embeddings answer/);
    e.up.script({ status: 429, errorMessage: 'too many' });
    await expectError(await post({ model: EMBED, input: 'x' }), 429, 'rate_limit_exceeded');
    // an upstream's code that is also one of Portico's, of another status, stays a 400 refusal: not our 409 or 429
    for (const code of ['conflict', 'read_only', 'insufficient_quota']) {
      e.up.script({ status: 400, errorBody: { error: { message: `upstream says ${code}`, type: 'invalid_request_error', param: null, code } } });
      const r = await expectError(await post({ model: EMBED, input: 'x' }), 400, 'validation_error');
      assert.match(r.message, new RegExp(`upstream says ${code}`));
    }
  });

  test('the model file: matryoshka only on embeddings models, parallel only on text models', () => {
    assert.throws(
      () => parseModelConfig('models:\n  - name: a\n    provider: llama\n    path: /x.gguf\n    matryoshka: true\n'),
      (err: unknown) => err instanceof ModelConfigError && /matryoshka applies to embeddings models only/.test((err as Error).message),
    );
    assert.throws(
      () => parseModelConfig('models:\n  - name: a\n    provider: llama\n    type: embeddings\n    path: /x.gguf\n    parallel: 2\n'),
      /parallel applies to text models only/,
    );
    assert.throws(() => parseModelConfig('models:\n  - name: a\n    provider: flite\n    type: embeddings\n'), /'type' must be one of: speech/);
    const ok = parseModelConfig('models:\n  - name: e\n    provider: llama\n    type: embeddings\n    path: /x.gguf\n    context_window: 512\n    matryoshka: true\n');
    assert.equal(ok.models[0]!.type, 'embeddings');
  });
});
