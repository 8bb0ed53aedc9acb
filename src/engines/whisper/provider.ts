import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { detectWhisperBinding, whisperInstallCommand } from './detect.js';

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
  // module look-ups only (./detect.ts); PORTICO_WHISPER_BINDING: a binding installed elsewhere (see create)
  available: (env) => detectWhisperBinding(env.PORTICO_WHISPER_BINDING || undefined),
  builtin: {
    // the first whisper model (configured or pulled) serves the built-in models, installed or not: a missing binding
    // is a 503 saying what to install, never a fall back to pocketsphinx, whose far worse transcripts a client could
    // not tell from whisper's
    recognizer: {
      order: 1,
      needsModel: true,
      hint: `configure a whisper model (pull a whisper model (portico models pull whisper:base.en) and install the whisper binding (${whisperInstallCommand()}), see docs/models.md)`,
      describe: (installed, model) =>
        installed ? `whisper (${model})` : `whisper (${model}), not installed: transcriptions answer 503 until the whisper binding is (docs/models.md)`,
    },
  },
  create: {
    async transcription(s, ctx) {
      const { createWhisperEngine } = await import('./index.js');
      // PORTICO_WHISPER_BINDING: a binding installed elsewhere (its module path or URL) instead of @fugood/whisper.node
      return createWhisperEngine({ modelPath: s.path, packageName: ctx.env.PORTICO_WHISPER_BINDING || undefined, log: ctx.log });
    },
  },
});
