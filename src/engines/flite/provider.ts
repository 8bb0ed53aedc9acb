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
  // the OpenAI voices flite renders (measured gains: npm run voices:levels, bench/voice-levels.ts)
  builtin: {
    voices: {
      engine: 'flite',
      renders: {
        alloy: { voice: 'slt', gainDb: -5, description: 'flite slt: US English, female, clear (the most natural flite voice)' },
        coral: { voice: 'slt', pitch: 1.2, gainDb: -6, description: 'flite slt at 1.2 x its pitch: US English, female, bright' },
        echo: { voice: 'rms', gainDb: 0.5, description: 'flite rms: US English, male' },
        fable: { voice: 'awb', gainDb: -0.5, description: 'flite awb: Scottish English, male' },
        onyx: { voice: 'kal16', gainDb: 7.5, description: 'flite kal16: US English, male, low, diphone' },
        sage: { voice: 'slt', pitch: 0.85, gainDb: -2.5, description: 'flite slt at 0.85 x its pitch: US English, female, calm' },
        verse: { voice: 'awb', pitch: 0.8, gainDb: -1, description: 'flite awb at 0.8 x its pitch: Scottish English, male, deep' },
      },
    },
  },
  create: {
    async speech(_s, ctx) {
      const { createFliteEngine } = await import('./index.js');
      return createFliteEngine({ poolSize: ctx.ttsPoolSize });
    },
  },
});
