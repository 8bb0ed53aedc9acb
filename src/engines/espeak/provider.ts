import { Type } from 'typebox';
import { defineProvider } from '../provider.js';

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
  create: {
    async speech(_s, ctx) {
      const { createEspeakEngine } = await import('./index.js');
      return createEspeakEngine({ poolSize: ctx.ttsPoolSize, warmVoices: ctx.warmVoices?.espeak });
    },
  },
});
