import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import type { ModelSpec } from '../../src/models/config.js';

/** Answers that must stay errors: nothing is sent before real audio exists. */
describe('speech: no 200 without audio', () => {
  let t: TestApp & { url?: string };
  let key: string;
  before(async () => {
    const models = [{ name: 'tts-down', provider: 'openai-compatible', type: 'speech', base_url: 'http://127.0.0.1:1/v1', timeout_ms: 2000 } as ModelSpec];
    t = await buildTestApp({ listen: true, models, builtins: true });
    key = await t.inferenceKey('sam');
  });
  after(() => t.close());

  const speak = (body: Record<string, unknown>) =>
    fetch(`${t.url}/v1/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = async () => {
    await t.services.usage.flush();
    return (await t.services.db.db.selectFrom('usage_records').select('id').where('user_id', '=', 'sam').execute()).length;
  };

  for (const format of ['mp3', 'wav', 'opus', 'flac', 'pcm']) {
    test(`input with nothing speakable (${format}) -> 400, not an empty or header-only 200, and nothing charged`, async () => {
      const before = await usage();
      for (const input of ['?!...', '—— …']) {
        const res = await speak({ model: 'tts-1', input, voice: 'alloy', response_format: format });
        const body = Buffer.from(await res.arrayBuffer());
        assert.equal(res.status, 400, `${input}: ${res.status} with ${body.length} bytes`);
        const err = JSON.parse(body.toString()).error;
        assert.equal(err.param, 'input');
      }
      assert.equal(await usage(), before);
    });
  }

  test('an upstream that cannot be reached is an error answer for wav too (no header sent first)', async () => {
    for (const format of ['wav', 'mp3', 'pcm']) {
      const res = await speak({ model: 'tts-down', input: 'Hello there.', voice: 'alloy', response_format: format });
      assert.ok(res.status >= 500 && res.status < 600, `${format}: ${res.status}`);
      const err = ((await res.json()) as any).error;
      assert.equal(typeof err.message, 'string');
    }
  });
});
