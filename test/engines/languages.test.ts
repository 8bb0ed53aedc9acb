/**
 * Language tables: lookups see only the tables' own entries. An upstream (or any caller) naming a member of
 * Object.prototype ("constructor", "toString", "__proto__") as its language must read as an unknown language,
 * not as a function that later crashes the verbose_json rendering with a 500.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { verboseJsonToTranscript } from '../../src/engines/openai-compatible/audio.js';
import { languageCode, languageName } from '../../src/engines/shared/languages.js';
import { formatTranscript } from '../../src/audio/transcript-format.js';

const PROTOTYPE_KEYS = ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__', 'isPrototypeOf', 'Constructor'];

test('languageCode: names, codes and regional tags; prototype members are unknown', () => {
  assert.equal(languageCode('English'), 'en');
  assert.equal(languageCode(' pt-BR '), 'pt');
  assert.equal(languageCode('zh_TW'), 'zh');
  assert.equal(languageCode('castilian'), 'es');
  assert.equal(languageCode(''), undefined);
  assert.equal(languageCode('-'), undefined);
  for (const key of PROTOTYPE_KEYS) {
    assert.equal(languageCode(key), undefined, key);
    assert.equal(languageCode(`${key}-US`), undefined, `${key}-US`);
  }
});

test('languageName: known codes give the verbose_json name, anything else comes back as given (a string)', () => {
  assert.equal(languageName('EN'), 'english');
  assert.equal(languageName('yue'), 'cantonese');
  for (const key of PROTOTYPE_KEYS) assert.equal(languageName(key), key);
});

test('an upstream transcription naming a prototype member as its language falls back to the request language', () => {
  for (const key of PROTOTYPE_KEYS) {
    const t = verboseJsonToTranscript({ text: 'hello', language: key }, 'de');
    assert.equal(t.language, 'de', key);
    const unknown = verboseJsonToTranscript({ text: 'hello', language: key });
    assert.equal(unknown.language, undefined, key);
  }
});

test('verbose_json of such a transcription reports the fallback language by name and does not throw', () => {
  for (const key of PROTOTYPE_KEYS) {
    const t = verboseJsonToTranscript({ text: 'hello', language: key });
    const out = formatTranscript(t, { task: 'transcribe', format: 'verbose_json', granularities: ['segment'], duration: 1, temperature: 0, language: 'fr' });
    assert.equal((out.body as Record<string, unknown>).language, 'french', key);
  }
});
