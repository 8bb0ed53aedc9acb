import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';

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
  create: {
    async transcription(s) {
      const { createPocketsphinxEngine, detectPocketsphinx } = await import('./index.js');
      const found = detectPocketsphinx({ binary: s.binary, hmm: s.path });
      if (!found.available) throw new EngineError(`pocketsphinx is not available (${found.reason}); install it with: ${found.install}`, 'engine_unavailable', 503);
      return createPocketsphinxEngine({ binary: found.binary, flavor: found.flavor, hmm: s.path });
    },
  },
});
