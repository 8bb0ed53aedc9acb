import { Type } from 'typebox';
import { defineProvider, type VoiceRendition } from '../provider.js';

/** The OpenAI voices espeak-ng renders (measured gains: npm run voices:levels, bench/voice-levels.ts). */
const RENDERS: Readonly<Record<string, VoiceRendition>> = {
  ash: { voice: 'en-us+m3', gainDb: 0.5, description: 'espeak-ng en-us+m3: US English, male' },
  ballad: { voice: 'en-gb-x-rp+m7', gainDb: -1, description: 'espeak-ng en-gb-x-rp+m7: British English (RP), male' },
  nova: { voice: 'en-us+f3', gainDb: 0, description: 'espeak-ng en-us+f3: US English, female, bright' },
  shimmer: { voice: 'en-us+f5', gainDb: 0.5, description: 'espeak-ng en-us+f5: US English, female, soft' },
  marin: { voice: 'en-gb-x-rp+f4', gainDb: -1.5, description: 'espeak-ng en-gb-x-rp+f4: British English (RP), female' },
  cedar: { voice: 'en-us+m1', gainDb: 2, description: 'espeak-ng en-us+m1: US English, male, low' },
};

/** The espeak-ng voices of the built-in voice table (warmed up in each espeak worker at start). */
export const ESPEAK_TABLE_VOICES: readonly string[] = [...new Set(Object.values(RENDERS).map((r) => r.voice))];

/** espeak-ng voices (WASM, in worker threads): one pool per process, shared by every model that uses it. */
export const espeak = defineProvider({
  name: 'espeak',
  summary: 'espeak-ng speech synthesis inside Portico (WASM in worker threads), many languages',
  serves: ['speech'],
  options: Type.Object(
    {
      quality: Type.Optional(
        Type.Union([Type.Literal('standard'), Type.Literal('hd')], { description: 'hd: higher sample rate and finer resampling (as tts-1-hd); default standard' }),
      ),
    },
    { additionalProperties: false },
  ),
  shared: true,
  builtin: {
    voices: { engine: 'espeak-ng', renders: RENDERS },
    // sentences in other scripts, whatever the voice: the language's espeak-ng voice in this variant (`cmn` + `+f3`)
    otherScripts: {
      alloy: '+f1',
      ash: '+m3',
      ballad: '+m7',
      coral: '+f2',
      echo: '+m1',
      fable: '+m2',
      onyx: '+m4',
      nova: '+f3',
      sage: '+f4',
      shimmer: '+f5',
      verse: '+m5',
      marin: '+f4',
      cedar: '+m6',
    },
  },
  create: {
    async speech(_s, ctx) {
      const { createEspeakEngine } = await import('./index.js');
      return createEspeakEngine({ poolSize: ctx.ttsPoolSize, warmVoices: ctx.warmVoices?.espeak });
    },
  },
});
