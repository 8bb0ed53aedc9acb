/**
 * The model file is strict (issue 8): an unknown key is an error naming the key, the entry and the allowed keys
 * (with the closest one for a typo), a wrong value lists the allowed ones, and a LiteLLM file says it is one.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { checkModelEntry, ModelConfigError, parseModelConfig } from '../../src/models/config.js';

const refused = (yaml: string): string => {
  try {
    parseModelConfig(yaml, 'models.yaml');
  } catch (e) {
    assert.ok(e instanceof ModelConfigError, `a ModelConfigError, got ${String(e)}`);
    return e.message;
  }
  assert.fail(`accepted:\n${yaml}`);
};

describe('the model file', () => {
  test('a good file gives typed entries; type defaults to the provider\u2019s first capability', () => {
    const { models } = parseModelConfig(
      [
        'models:',
        '  - name: gpt-4o-mini',
        '    provider: openai-compatible',
        '    base_url: http://127.0.0.1:11434/v1',
        '    upstream_model: llama3.2',
        '    context_window: 8192',
        '    pricing: { input_per_million: 0.15, output_per_million: 0.6 }',
        '  - name: tts-upstream',
        '    provider: openai-compatible',
        '    type: speech',
        '    base_url: https://speech.example/v1',
        '    voices: [af_heart]',
      ].join('\n'),
    );
    assert.equal(models.length, 2);
    assert.deepEqual(
      models.map((m) => [m.name, m.type]),
      [
        ['gpt-4o-mini', 'text'],
        ['tts-upstream', 'speech'],
      ],
    );
    assert.equal(models[0]!.upstream_model, 'llama3.2');
    assert.equal(models[0]!.pricing?.output_per_million, 0.6);
  });

  test('an empty file, or no models key, is no models', () => {
    assert.deepEqual(parseModelConfig('').models, []);
    assert.deepEqual(parseModelConfig('models: []').models, []);
  });

  test('typos in an entry name the key, the entry, the closest allowed key and the allowed keys', () => {
    const base = '  - name: m\n    provider: openai-compatible\n    base_url: http://h/v1\n';
    const windw = refused(`models:\n${base}    context_windw: 100\n`);
    assert.match(windw, /^models\.yaml: models\[0\] \(m\): unknown key 'context_windw' for provider openai-compatible/);
    assert.match(windw, /did you mean 'context_window'\?/);
    assert.match(windw, /allowed keys: name, provider, type, owned_by, pricing, base_url, api_key_env/);
    assert.match(refused(`models:\n${base}    upstream-model: x\n`), /unknown key 'upstream-model'.*did you mean 'upstream_model'\?/);
    assert.match(refused(`models:\n${base}    apikey: x\n`), /unknown key 'apikey'/);
    // inside pricing too, with pricing's own keys
    const price = refused(`models:\n${base}    pricing: { input_per_milion: 1 }\n`);
    assert.match(price, /unknown key 'pricing\.input_per_milion'.*did you mean 'input_per_million'\?.*allowed keys of pricing: input_per_million/);
  });

  test('a wrong value lists the allowed ones', () => {
    const base = '  - name: m\n    provider: openai-compatible\n    base_url: http://h/v1\n';
    assert.match(refused(`models:\n${base}    api: completions\n`), /'api' must be one of: chat\.completions, responses/);
    assert.match(refused(`models:\n${base}    type: video\n`), /'type' must be one of: text, speech, transcription, embeddings for provider openai-compatible/);
    assert.match(refused(`models:\n${base}    context_window: "big"\n`), /'context_window' must be a whole number/);
    assert.match(refused('models:\n  - name: m\n    provider: openai-compatible\n    base_url: ftp://h\n'), /'base_url' must be an http:\/\/ or https:\/\/ URL/);
    assert.match(refused('models:\n  - name: m\n    provider: openai-compatible\n'), /'base_url' is required for provider openai-compatible/);
  });

  test('an unknown or missing provider lists the providers', () => {
    const unknown = refused('models:\n  - name: m\n    provider: ollama\n');
    assert.match(unknown, /unknown provider "ollama"; one of: .*openai-compatible.*llama/);
    assert.match(refused('models:\n  - name: m\n'), /'provider' is required; one of: /);
    assert.match(refused('models:\n  - just a string\n'), /models\[0\]: each model must be a mapping with at least name and provider/);
  });

  test('a LiteLLM model_list file, and files that are not a mapping, say what is wrong', () => {
    assert.match(refused('model_list:\n  - model_name: gpt\n    litellm_params: { model: openai/gpt }\n'), /'model_list' is LiteLLM's key; Portico reads a 'models' list/);
    assert.match(refused('- a\n- b\n'), /must be a mapping with a 'models' list/);
    assert.match(refused('models: {a: 1}\n'), /'models' must be a list/);
    assert.match(refused('models: [\n'), /not valid YAML/);
  });

  test('rules across keys: api only on text, voices only on speech', () => {
    assert.throws(
      () => checkModelEntry({ name: 'm', provider: 'openai-compatible', type: 'speech', base_url: 'http://h/v1', api: 'responses' }, 'entry'),
      /api applies to text models only \(this one is speech\)/,
    );
    assert.throws(() => checkModelEntry({ name: 'm', provider: 'openai-compatible', base_url: 'http://h/v1', voices: ['x'] }, 'entry'), /voices applies to speech models only/);
  });
});
