import { Type } from 'typebox';
import { defineProvider } from '../provider.js';

/** Flite voices (WASM, in worker threads): one pool per process, shared by every model that uses it. */
export const flite = defineProvider({
  name: 'flite',
  summary: 'Flite speech synthesis inside Portico (WASM in worker threads)',
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
      const { createFliteEngine } = await import('./index.js');
      return createFliteEngine({ poolSize: ctx.ttsPoolSize });
    },
  },
});
