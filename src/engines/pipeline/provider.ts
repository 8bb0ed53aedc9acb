import { Type } from 'typebox';
import { defineProvider } from '../provider.js';

const part = (what: string) => Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: what }));

/**
 * A realtime model made of models Portico serves: a transcription model hears the user, a text model answers (with
 * tools), a speech model speaks; each any model of the model file, embedded or routed. The realtime feature runs the
 * pipeline (src/realtime); the engine only says which models it is made of.
 */
export const pipeline = defineProvider({
  name: 'pipeline',
  summary: "a realtime model made of Portico's own models: transcription, text (with tools), speech",
  serves: ['realtime'],
  options: Type.Object(
    {
      transcription: part('the transcription model that hears the user (default whisper-1)'),
      text: part('the text model that answers (default: the first text model)'),
      speech: part('the speech model that speaks the answer (default tts-1)'),
    },
    { additionalProperties: false },
  ),
  builtin: { pipeline: true },
  create: {
    async realtime(s) {
      return {
        kind: 'pipeline',
        parts: { transcription: s.transcription, text: s.text, speech: s.speech },
        close: async () => {},
      };
    },
  },
});
