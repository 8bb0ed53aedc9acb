import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import { POCKETSPHINX_INSTALL_HINT, detectPocketsphinx } from './detect.js';

/** Debian's pocketsphinx command line recognizer (English). */
export const pocketsphinx = defineProvider({
  name: 'pocketsphinx',
  summary: "Debian's pocketsphinx speech recognizer (English only)",
  serves: ['transcription'],
  options: Type.Object(
    {
      path: Type.Optional(Type.String({ minLength: 1, description: 'acoustic model directory (default: the Debian en-us model)' })),
      binary: Type.Optional(Type.String({ minLength: 1, description: 'the pocketsphinx executable (default: found on PATH)' })),
    },
    { additionalProperties: false },
  ),
  // file checks only (./detect.ts): asked at each request for a built-in model until it is installed
  available: () => detectPocketsphinx().available,
  builtin: {
    // English only and far less accurate than whisper: the built-in models use it when no whisper model is there
    recognizer: {
      order: 2,
      needsModel: false,
      hint: `Install pocketsphinx (${POCKETSPHINX_INSTALL_HINT})`,
      describe: () => 'pocketsphinx (English; configure or pull a whisper model for better accuracy)',
      // measured on speech it did not make (issue 26): 37-96 % word error, where whisper's base.en makes a few %
      weaker: 'English only, and far less accurate than whisper',
    },
  },
  create: {
    async transcription(s) {
      const { createPocketsphinxEngine, detectPocketsphinx } = await import('./index.js');
      const found = detectPocketsphinx({ binary: s.binary, hmm: s.path });
      if (!found.available) throw new EngineError(`pocketsphinx is not available (${found.reason}); install it with: ${found.install}`, 'engine_unavailable', 503);
      return createPocketsphinxEngine({ binary: found.binary, flavor: found.flavor, hmm: s.path });
    },
  },
});
