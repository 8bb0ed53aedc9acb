import { Type } from 'typebox';
import { defineProvider } from '../provider.js';

/** whisper.cpp through its optional Node binding, with a ggml model file. */
export const whisper = defineProvider({
  name: 'whisper',
  summary: 'whisper.cpp speech recognition inside Portico (optional binding, ggml model file)',
  serves: ['transcription'],
  options: Type.Object(
    {
      path: Type.String({ minLength: 1, description: 'the ggml model file' }),
    },
    { additionalProperties: false },
  ),
  create: {
    async transcription(s, ctx) {
      const { createWhisperEngine } = await import('./index.js');
      // PORTICO_WHISPER_BINDING: a binding installed elsewhere (its module path or URL) instead of @fugood/whisper.node
      return createWhisperEngine({ modelPath: s.path, packageName: ctx.env.PORTICO_WHISPER_BINDING || undefined, log: ctx.log });
    },
  },
});
