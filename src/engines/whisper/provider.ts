import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { detectWhisperBinding, whisperUnavailableHint } from './detect.js';

/** whisper.cpp through its Node binding's prebuilt CPU package (an optional dependency), with a ggml model file. */
export const whisper = defineProvider({
  name: 'whisper',
  summary: 'whisper.cpp speech recognition inside Portico (prebuilt CPU binary installed by npm, ggml model file)',
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
    // the first whisper model (configured or pulled) serves the built-in models, loadable or not: a missing binary
    // (left out of the install, or no prebuilt for the platform) is a 503 saying so, never a fall back to
    // pocketsphinx, whose far worse transcripts a client could not tell from whisper's
    recognizer: {
      order: 1,
      needsModel: true,
      hint: 'pull a whisper model (portico models pull whisper:base.en) or configure one, see docs/models.md',
      describe: (installed, model) => (installed ? `whisper (${model})` : `whisper (${model}), not installed: transcriptions answer 503 (${whisperUnavailableHint()})`),
    },
  },
  create: {
    async transcription(s, ctx) {
      const { createWhisperEngine } = await import('./index.js');
      // PORTICO_WHISPER_BINDING: a binding installed elsewhere (a module specifier, path or file: URL) instead of this platform's package
      // whisperTimeout: the bound on one job (WHISPER_TIMEOUT_MS, WHISPER_TIMEOUT_PER_AUDIO_SECOND_MS)
      return createWhisperEngine({ modelPath: s.path, packageName: ctx.env.PORTICO_WHISPER_BINDING || undefined, log: ctx.log, timeout: ctx.whisperTimeout });
    },
  },
});
