/**
 * The prices of a model applied to what a request used (src/models/pricing.ts), and the decoders' and Messages'
 * reading of prompt-cache counts: fresh input, cache reads, cache writes (five-minute and one-hour) and output each
 * at their own price, each falling back as docs/models.md says; counts that do not add up are bounded by the input;
 * the cache-write keys are checked in the model file like the other token prices.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Prices } from '../../src/models/pricing.js';
import { ModelConfigError, parseModelConfig } from '../../src/models/config.js';
import { AUDIO_UNITS } from '../../src/audio/service.js';
import { anthropicUsage } from '../../src/engines/anthropic/decoder.js';
import { converseUsage } from '../../src/engines/bedrock/decoder.js';
import { readUsage, usageObject } from '../../src/messages/run.js';
import { RealtimeService, type RealtimeDeps } from '../../src/realtime/service.js';
import type { ModelSpec } from '../../src/models/spec.js';

const prices = new Prices();
const FULL = { input_per_million: 1, cached_input_per_million: 0.1, cache_write_input_per_million: 1.25, cache_write_1h_input_per_million: 2, output_per_million: 2 };

describe('pricing of prompt-cache writes', () => {
  test('each part of the input at its price: fresh, read, written for five minutes, written for an hour', () => {
    const used = { inputTokens: 1_000_000, cachedTokens: 600_000, cacheWriteTokens: 300_000, cacheWrite1hTokens: 100_000, outputTokens: 500_000 };
    // 100k*1 + 600k*0.1 + 200k*1.25 + 100k*2 + 500k*2 (micro-credits: per million tokens times a million)
    assert.equal(prices.costMicros({ pricing: FULL }, used), 100_000 + 60_000 + 250_000 + 200_000 + 1_000_000);
  });

  test('fallbacks: no one-hour price -> the cache-write price; no cache-write price -> the input price (as before the key)', () => {
    const used = { inputTokens: 1_000_000, cachedTokens: 600_000, cacheWriteTokens: 300_000, cacheWrite1hTokens: 100_000, outputTokens: 0 };
    const { cache_write_1h_input_per_million: _h, ...no1h } = FULL;
    assert.equal(prices.costMicros({ pricing: no1h }, used), 100_000 + 60_000 + 300_000 * 1.25);
    const { cache_write_input_per_million: _w, ...noWrite } = no1h;
    assert.equal(prices.costMicros({ pricing: noWrite }, used), 100_000 + 60_000 + 300_000);
    // a one-hour price alone: the five-minute writes at the input price
    assert.equal(prices.costMicros({ pricing: { ...noWrite, cache_write_1h_input_per_million: 2 } }, used), 100_000 + 60_000 + 200_000 + 200_000);
    // no input price at all: nothing for input of any kind
    assert.equal(prices.costMicros({ pricing: { output_per_million: 2 } }, { ...used, outputTokens: 10 }), 20);
  });

  test('counts that do not add up are bounded by the input: reads first, then writes, then their one-hour part', () => {
    // writes past what the reads leave: only the rest is priced as written; nothing is charged twice or below zero
    assert.equal(prices.costMicros({ pricing: FULL }, { inputTokens: 1000, cachedTokens: 800, cacheWriteTokens: 500 }), 800 * 0.1 + 200 * 1.25);
    assert.equal(prices.costMicros({ pricing: FULL }, { inputTokens: 1000, cacheWriteTokens: 400, cacheWrite1hTokens: 900 }), 600 + 400 * 2);
    assert.equal(prices.costMicros({ pricing: FULL }, { inputTokens: 1000, cachedTokens: -5, cacheWriteTokens: Number.NaN }), 1000);
  });

  test("a realtime pipeline's model without pricing: its text model's cache-write prices are its own", () => {
    const svc = new RealtimeService({} as RealtimeDeps);
    const rt = { name: 'rt', provider: 'pipeline', type: 'realtime' } as ModelSpec;
    const text = { name: 'claude', provider: 'anthropic', type: 'text', pricing: FULL } as ModelSpec;
    const priced = svc.pricing(rt, { text });
    const used = { inputTokens: 1_000_000, cachedTokens: 600_000, cacheWriteTokens: 300_000, cacheWrite1hTokens: 100_000, outputTokens: 0 };
    assert.equal(prices.costMicros(priced, used), 100_000 + 60_000 + 250_000 + 200_000);
  });

  test('the model file takes the keys on text models, refuses them elsewhere and below zero', () => {
    const text = (pricing: string) => `models:\n  - { name: m, provider: openai-compatible, base_url: "http://h/v1", pricing: ${pricing} }\n`;
    const refused = (yaml: string) => {
      try {
        parseModelConfig(yaml, 'models.yaml', { units: AUDIO_UNITS });
      } catch (e) {
        assert.ok(e instanceof ModelConfigError, String(e));
        return e.message;
      }
      assert.fail('accepted');
    };
    const ok = parseModelConfig(text('{ input_per_million: 1, cache_write_input_per_million: 1.25, cache_write_1h_input_per_million: 2 }'), 'models.yaml', { units: AUDIO_UNITS });
    assert.equal(ok.models[0]!.pricing?.cache_write_1h_input_per_million, 2);
    assert.match(refused(text('{ cache_write_input_per_million: -1 }')), /cache_write_input_per_million/);
    assert.match(
      refused('models:\n  - { name: e, provider: openai-compatible, type: embeddings, base_url: "http://h/v1", pricing: { cache_write_input_per_million: 1 } }\n'),
      /'pricing\.cache_write_input_per_million' applies to text models only \(this one is embeddings\)/,
    );
  });
});

describe('prompt-cache counts read from the upstreams', () => {
  test("Anthropic's usage: writes and their one-hour part; message_delta's repeated counts keep the split", () => {
    const start = anthropicUsage({
      input_tokens: 10,
      cache_read_input_tokens: 20,
      cache_creation_input_tokens: 30,
      cache_creation: { ephemeral_5m_input_tokens: 18, ephemeral_1h_input_tokens: 12 },
      output_tokens: 1,
    });
    assert.deepEqual(start, { inputTokens: 60, outputTokens: 1, cachedTokens: 20, cacheWriteTokens: 30, cacheWrite1hTokens: 12 });
    assert.deepEqual(anthropicUsage({ input_tokens: 10, cache_read_input_tokens: 20, cache_creation_input_tokens: 30, output_tokens: 7 }, start), { ...start, outputTokens: 7 });
    assert.deepEqual(anthropicUsage({ input_tokens: null, output_tokens: 9 }, start), { ...start, outputTokens: 9 });
    // no writes: none counted; a split larger than the writes is bounded by them
    assert.deepEqual(anthropicUsage({ input_tokens: 5, output_tokens: 1 }), { inputTokens: 5, outputTokens: 1 });
    assert.equal(anthropicUsage({ input_tokens: 5, cache_creation_input_tokens: 4, cache_creation: { ephemeral_1h_input_tokens: 40 } })?.cacheWrite1hTokens, 4);
    // the forwarded Messages read the same
    assert.deepEqual(
      readUsage(undefined, { input_tokens: 10, cache_read_input_tokens: 20, cache_creation_input_tokens: 30, cache_creation: { ephemeral_1h_input_tokens: 12 }, output_tokens: 1 }),
      start,
    );
    assert.deepEqual(readUsage(start, { cache_creation_input_tokens: 30, input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 4 }), { ...start, outputTokens: 4 });
  });

  test("Bedrock's usage: cacheWriteInputTokens, the one-hour part from cacheDetails", () => {
    assert.deepEqual(
      converseUsage({
        inputTokens: 10,
        cacheReadInputTokens: 20,
        cacheWriteInputTokens: 30,
        cacheDetails: [
          { ttl: '1h', inputTokens: 12 },
          { ttl: '5m', inputTokens: 18 },
        ],
        outputTokens: 1,
      }),
      { inputTokens: 60, outputTokens: 1, cachedTokens: 20, cacheWriteTokens: 30, cacheWrite1hTokens: 12 },
    );
    assert.deepEqual(converseUsage({ inputTokens: 10, cacheWriteInputTokens: 30, outputTokens: 1 }), { inputTokens: 40, outputTokens: 1, cacheWriteTokens: 30 });
    assert.deepEqual(converseUsage({ inputTokens: 10, outputTokens: 1, cacheDetails: 'junk' }), { inputTokens: 10, outputTokens: 1 });
  });

  test('the Messages usage object: input_tokens without reads or writes; the writes and their split as Anthropic gives them', () => {
    assert.deepEqual(usageObject({ inputTokens: 60, outputTokens: 1, cachedTokens: 20, cacheWriteTokens: 30, cacheWrite1hTokens: 12 }), {
      input_tokens: 10,
      cache_creation_input_tokens: 30,
      cache_read_input_tokens: 20,
      cache_creation: { ephemeral_5m_input_tokens: 18, ephemeral_1h_input_tokens: 12 },
      output_tokens: 1,
      service_tier: 'standard',
    });
    // an engine that counts no writes: 0, and no split
    assert.deepEqual(usageObject({ inputTokens: 5, outputTokens: 1 }), {
      input_tokens: 5,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: 1,
      service_tier: 'standard',
    });
  });
});
