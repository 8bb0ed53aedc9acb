/**
 * The model file is strict (issue 8): an unknown key is an error naming the key, the entry and the allowed keys
 * (with the closest one for a typo), a wrong value lists the allowed ones, and a LiteLLM file says it is one.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkModelEntry, ModelConfigError, parseModelConfig, type CheckOptions } from '../../src/models/config.js';
import { AUDIO_UNITS } from '../../src/audio/service.js';
import { cleanTmp, portico, tmp } from '../cli/helpers.js';

/** the priced units as the serving runtime knows them (what the audio feature declares) */
const SERVING: CheckOptions = { units: AUDIO_UNITS };

const refused = (yaml: string, opts: CheckOptions = SERVING): string => {
  try {
    parseModelConfig(yaml, 'models.yaml', opts);
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
    assert.match(refused(`models:\n${base}    type: video\n`), /'type' must be one of: text, speech, transcription, embeddings, realtime for provider openai-compatible/);
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
    assert.throws(
      () => checkModelEntry({ name: 'm', provider: 'openai-compatible', type: 'embeddings', base_url: 'http://h/v1', max_tokens_field: 'max_completion_tokens' }, 'entry'),
      /max_tokens_field applies to text models only \(this one is embeddings\)/,
    );
    assert.throws(() => checkModelEntry({ name: 'm', provider: 'openai-compatible', base_url: 'http://h/v1', max_tokens_field: 'max_output' }, 'entry'), /max_tokens_field/);
    checkModelEntry({ name: 'm', provider: 'openai-compatible', base_url: 'http://h/v1', max_tokens_field: 'max_completion_tokens' }, 'entry');
  });
});

/** the message of a file refused with this environment (`env` given: as `portico serve` checks it) */
const refusedWith = (yaml: string, env?: Record<string, string | undefined>): string => {
  try {
    parseModelConfig(yaml, 'models.yaml', env ? { env } : {});
  } catch (e) {
    assert.ok(e instanceof ModelConfigError, `a ModelConfigError, got ${String(e)}`);
    return e.message;
  }
  assert.fail(`accepted:\n${yaml}`);
};

describe('the model file: what the check used to accept without a word (issue 21)', () => {
  const entry = (lines: string) => `models:\n  - name: m\n    provider: openai-compatible\n${lines}`;
  const url = (u: string) => entry(`    base_url: ${JSON.stringify(u)}\n`);

  test('a base_url no engine can be made from: a port outside 1-65535, no host, whitespace, a query', () => {
    assert.equal(refused(url('http://127.0.0.1:99999/v1')), "models.yaml: models[0] (m): 'base_url' has the port 99999, outside 1-65535");
    assert.match(refused(url('http://127.0.0.1:0/v1')), /'base_url' has the port 0, outside 1-65535/);
    assert.match(refused(url('http://')), /^models\.yaml: models\[0\] \(m\): 'base_url' has no host: write it as http:\/\/host\[:port\]\/v1$/);
    assert.match(refused(url('https:///v1')), /'base_url' has no host: write it as https:\/\/host/);
    assert.match(refused(url('http://:8080/v1')), /'base_url' has no host/);
    for (const spaced of ['http://my host/v1', 'http://host/v 1', ' http://host/v1', 'http://host/v1 ', 'http://host\t/v1']) {
      assert.match(refused(url(spaced)), /'base_url' contains whitespace \(a space, tab or line break\)/, JSON.stringify(spaced));
    }
    assert.match(refused(url('http://ho%zz/v1')), /'base_url' is not a valid URL/);
    assert.match(refused(url('http://host/v1?api-version=1')), /'base_url' must not carry a query \(\?\.\.\.\) or a fragment/);
    assert.match(refused(url('http://host/v1#x')), /must not carry a query/);
    assert.match(refused(url('ftp://host/v1')), /'base_url' must be an http:\/\/ or https:\/\/ URL/);
    // in a deployment too, named by its place
    assert.match(
      refused(
        'models:\n  - name: m\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1" }\n      - { provider: openai-compatible, base_url: "http://b:70000/v1" }\n',
      ),
      /^models\.yaml: models\[0\] \(m\)\.deployments\[1\]: 'base_url' has the port 70000, outside 1-65535$/,
    );
    // what works keeps working: IPv6, userinfo, a port, no path
    for (const good of ['http://[::1]:8080/v1', 'https://user:pa%40ss@api.example.com/v1', 'http://127.0.0.1:65535', 'https://h']) {
      assert.equal(parseModelConfig(url(good)).models[0]!.base_url, good);
    }
  });

  test("a base_url's credentials are never repeated in the message", () => {
    const msg = refused(url('http://alice:hunter2-secret@host:99999/v1'));
    assert.match(msg, /port 99999/);
    assert.doesNotMatch(msg, /hunter2|alice/);
  });

  test('api_key_env: unset or empty in the environment is an error naming the variable, never its value', () => {
    const keyed = (name: string) => entry(`    base_url: http://h/v1\n    api_key_env: ${name}\n`);
    assert.equal(
      refusedWith(keyed('UPSTREAM_KEY'), {}),
      "models.yaml: models[0] (m): 'api_key_env' names UPSTREAM_KEY, which is not set in Portico's environment: set it, or remove api_key_env for an upstream that needs no key",
    );
    assert.match(refusedWith(keyed('UPSTREAM_KEY'), { UPSTREAM_KEY: '' }), /'api_key_env' names UPSTREAM_KEY, which is set but empty/);
    assert.match(refusedWith(keyed('UPSTREAM_KEY'), { UPSTREAM_KEY: '  ' }), /set but empty/);
    assert.equal(parseModelConfig(keyed('UPSTREAM_KEY'), 'f', { env: { UPSTREAM_KEY: 'sk-live' } }).models[0]!.api_key_env, 'UPSTREAM_KEY');
    // without an environment (operator commands, which call no upstream) only the name's shape is checked
    assert.equal(parseModelConfig(keyed('UPSTREAM_KEY')).models[0]!.api_key_env, 'UPSTREAM_KEY');
    // the key itself pasted in place of the name: refused without repeating it
    const pasted = refused(keyed('sk-proj-abcdef0123456789'));
    assert.match(pasted, /'api_key_env' must be the name of an environment variable \(letters, digits and _\), not the key itself/);
    assert.doesNotMatch(pasted, /abcdef0123456789/);
    assert.match(refused(keyed('$UPSTREAM_KEY')), /'api_key_env' takes the variable's name without '\$': api_key_env: UPSTREAM_KEY/);
    // every deployment is checked, and the message says which
    assert.match(
      refusedWith(
        'models:\n  - name: m\n    deployments:\n      - { provider: openai-compatible, base_url: "http://a/v1", api_key_env: A_KEY }\n      - { provider: openai-compatible, base_url: "http://b/v1", api_key_env: B_KEY }\n',
        { A_KEY: 'x' },
      ),
      /^models\.yaml: models\[0\] \(m\)\.deployments\[1\]: 'api_key_env' names B_KEY, which is not set/,
    );
  });

  test('timeouts that contradict each other, and connect_ms where nothing connects', () => {
    const timed = (t: string, provider = '    base_url: http://h/v1\n') => entry(`${provider}    timeouts: ${t}\n`);
    assert.match(
      refused(timed('{ first_byte_ms: 60000, total_ms: 30000 }')),
      /'timeouts\.first_byte_ms' \(60000\) is longer than 'timeouts\.total_ms' \(30000\): the first output must come within the whole try/,
    );
    assert.match(refused(timed('{ connect_ms: 5000, first_byte_ms: 1000 }')), /'timeouts\.connect_ms' \(5000\) is longer than 'timeouts\.first_byte_ms' \(1000\)/);
    assert.match(refused(timed('{ connect_ms: 5000, total_ms: 1000 }')), /'timeouts\.connect_ms' \(5000\) is longer than 'timeouts\.total_ms' \(1000\)/);
    assert.match(
      refused('models:\n  - name: m\n    provider: llama\n    path: /m.gguf\n    timeouts: { connect_ms: 1000 }\n'),
      /'timeouts\.connect_ms' applies to deployments that call a server \(openai-compatible\), not to llama/,
    );
    // consistent values, and one value alone, are accepted
    assert.deepEqual(parseModelConfig(timed('{ connect_ms: 1000, first_byte_ms: 1000, total_ms: 5000 }')).models[0]!.timeouts, {
      connect_ms: 1000,
      first_byte_ms: 1000,
      total_ms: 5000,
    });
    assert.equal(parseModelConfig(timed('{ total_ms: 1000 }')).models[0]!.timeouts?.total_ms, 1000);
  });

  test('keys that do nothing on this type: routing on speech and transcription, prices never charged, context_window', () => {
    const speech = (more: string) => `models:\n  - name: s\n    provider: flite\n${more}`;
    for (const [k, v] of [
      ['rpm', '5'],
      ['tpm', '5'],
      ['timeouts', '{ total_ms: 100 }'],
      ['retries', '1'],
      ['fallbacks', '[x]'],
      ['breaker', '{ failures: 2 }'],
      ['routing', 'least-busy'],
    ]) {
      assert.match(
        refused(speech(`    ${k}: ${v}\n`)),
        new RegExp(`^models\\.yaml: models\\[0\\] \\(s\\): '${k}' applies to text and embeddings models only: speech models are not routed`),
      );
    }
    assert.match(
      refused('models:\n  - name: s\n    type: transcription\n    deployments:\n      - { provider: whisper, path: /a.bin }\n      - { provider: whisper, path: /b.bin }\n'),
      /models\[0\] \(s\): a transcription model takes one deployment: speech and transcription are not routed/,
    );
    assert.match(refused(speech('    pricing: { input_per_million: 1 }\n')), /'pricing\.input_per_million' applies to text and embeddings models only \(this one is speech\)/);
    assert.match(refused(entry('    base_url: http://h/v1\n    pricing: { per_character: 1 }\n')), /'pricing\.per_character' applies to speech models only \(this one is text\)/);
    assert.match(
      refused(entry('    base_url: http://h/v1\n    type: embeddings\n    pricing: { output_per_million: 1 }\n')),
      /'pricing\.output_per_million' applies to text models only \(this one is embeddings\)/,
    );
    assert.match(refused(entry('    base_url: http://h/v1\n    type: transcription\n    pricing: { per_audio_second: 1, per_character: 1 }\n')), /'pricing\.per_character'/);
    assert.match(
      refused(entry('    base_url: http://h/v1\n    type: embeddings\n    context_window: 512\n')),
      /context_window applies to text models only \(this one is embeddings\)/,
    );
    // what each type is charged by is accepted
    const ok = parseModelConfig(
      'models:\n  - { name: s, provider: flite, pricing: { per_character: 1 } }\n  - { name: e, provider: openai-compatible, type: embeddings, base_url: "http://h/v1", pricing: { input_per_million: 1 } }\n',
      'models.yaml',
      SERVING,
    );
    assert.equal(ok.models.length, 2);
    // a unit no feature meters: refused, with the closest pricing key a feature declares
    assert.match(
      refused('models:\n  - { name: s, provider: flite, pricing: { per_charcter: 1 } }\n'),
      /unknown key 'pricing\.per_charcter' \(did you mean 'per_character'\?\); allowed keys of pricing: input_per_million, output_per_million, cached_input_per_million, cache_write_input_per_million, cache_write_1h_input_per_million, per_character, per_audio_second/,
    );
    // without the features' units (an operator command, which charges nothing) a per_<unit> key is taken as it is
    assert.equal(parseModelConfig('models:\n  - { name: s, provider: flite, pricing: { per_image: 1 } }\n').models.length, 1);
  });

  test('names clients could not send, ids that collide with a model name, a fallback named twice', () => {
    assert.match(refused('models:\n  - { name: " padded", provider: flite }\n'), /models\[0\] \( padded\): 'name' has spaces at an end or a control character/);
    assert.match(refused('models:\n  - { name: "tab\\tname", provider: flite }\n'), /'name' has spaces at an end or a control character/);
    // a model without deployments keys its engine by its name: another model's deployment may not take that name
    assert.match(
      refused('models:\n  - { name: a, id: a-1, provider: llama, path: /a.gguf }\n  - name: b\n    deployments:\n      - { id: a, provider: llama, path: /b.gguf }\n'),
      /models\[1\]: the deployment id "a" is used by the model "a" too/,
    );
    assert.match(
      refused('models:\n  - name: b\n    deployments:\n      - { id: a, provider: llama, path: /b.gguf }\n  - { name: a, id: a-1, provider: llama, path: /a.gguf }\n'),
      /models\[1\]: the deployment id "a" is used by the model "b" too/,
    );
    assert.match(
      refused(
        'models:\n  - name: b\n    deployments:\n      - { id: a, provider: llama, path: /b.gguf }\n  - name: a\n    deployments:\n      - { provider: llama, path: /a.gguf }\n',
      ),
      /models\[0\] \(b\): the deployment id "a" is the name of another model/,
    );
    assert.match(
      refused('models:\n  - { name: a, provider: llama, path: /a.gguf, fallbacks: [b, b] }\n  - { name: b, provider: llama, path: /b.gguf }\n'),
      /models\[0\] \(a\): 'fallbacks' names "b" twice/,
    );
  });
});

describe('portico serve refuses a model file the check refuses, before serving anything', () => {
  after(cleanTmp);
  const serveWith = (yaml: string, env: Record<string, string> = {}) => {
    const dir = tmp();
    const file = join(dir, 'models.yaml');
    writeFileSync(file, yaml);
    return portico(['serve'], { DATA_DIR: join(dir, 'data'), PORTICO_CONFIG: file, PORTICO_DB: 'memory', PORT: '0', ...env });
  };

  test('a base_url with port 99999: exit 2, one line naming the file, entry and key (it used to start and fail every request)', async () => {
    const r = await serveWith('models:\n  - name: m\n    provider: openai-compatible\n    base_url: http://127.0.0.1:99999/v1\n');
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^portico: .*models\.yaml: models\[0\] \(m\): 'base_url' has the port 99999, outside 1-65535\n$/);
  });

  test('an api_key_env that is not set: exit 2 naming the variable; set, it serves; operator commands do not need it', async () => {
    const yaml = 'models:\n  - name: m\n    provider: openai-compatible\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: PORTICO_TEST_UNSET_KEY\n';
    const r = await serveWith(yaml);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /'api_key_env' names PORTICO_TEST_UNSET_KEY, which is not set in Portico's environment/);
    const empty = await serveWith(yaml, { PORTICO_TEST_UNSET_KEY: '' });
    assert.equal(empty.code, 2, empty.stderr);
    assert.match(empty.stderr, /PORTICO_TEST_UNSET_KEY, which is set but empty/);
    // an operator command reads the same file (its core loads it) without calling any upstream: the variable is
    // not its business
    const dir = tmp();
    const file = join(dir, 'models.yaml');
    writeFileSync(file, yaml);
    const grant = await portico(['credits', 'grant', '--user', 'u', '--amount', '1'], { DATA_DIR: join(dir, 'data'), PORTICO_CONFIG: file });
    assert.equal(grant.code, 0, grant.stderr);
    assert.match(grant.stdout, /granted 1 credits to user u/);
    // and a file the check refuses stops it as before
    writeFileSync(file, 'models:\n  - name: m\n    provider: openai-compatible\n    base_url: http://\n');
    const bad = await portico(['credits', 'grant', '--user', 'u', '--amount', '1'], { DATA_DIR: join(dir, 'data'), PORTICO_CONFIG: file });
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /'base_url' has no host/);
  });
});
