import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { SHERPA_PACKAGE } from './package.js';
import { parsePiperConfig } from './voice-files.js';
import { describeSpeakers, PIPER_OPENAI_VOICES, speakerTable } from './speakers.js';

/** What a listing says of a voice, by its config file (read once per file: a few kB of JSON). */
const described = new Map<string, string>();

/**
 * Neural voices: piper (VITS) voices run by sherpa-onnx inside Portico. A model of this provider speaks the
 * thirteen OpenAI voice names, each as one of the voice's speakers (./speakers.ts). `portico models pull
 * piper:<voice>` makes such a model; one can also be configured with `path`.
 */
export const piper = defineProvider({
  name: 'piper',
  summary: 'piper neural voices inside Portico (sherpa-onnx, optional dependency; a piper .onnx and its .onnx.json)',
  serves: ['speech'],
  options: Type.Object(
    {
      path: Type.String({ minLength: 1, description: 'the piper voice (.onnx)' }),
      config: Type.Optional(Type.String({ minLength: 1, description: "the voice's .onnx.json (default: the path with .json appended)" })),
      data_dir: Type.Optional(Type.String({ minLength: 1, description: "espeak-ng's data folder (default: looked for; docs/models.md)" })),
      speakers: Type.Optional(
        Type.Record(
          Type.String({ pattern: '^(alloy|ash|ballad|coral|echo|fable|onyx|nova|sage|shimmer|verse|marin|cedar)$' }),
          Type.Union([Type.Integer({ minimum: 0 }), Type.String({ minLength: 1 })]),
          {
            description: 'OpenAI voice -> speaker of the voice (its id, or its name in the .onnx.json); default: spread over its speakers',
          },
        ),
      ),
    },
    { additionalProperties: false },
  ),
  // one engine per voice file, whatever the names it is served under
  engineKey: (s) => `${s.path}\u0000${s.config ?? ''}\u0000${s.data_dir ?? ''}\u0000${JSON.stringify(s.speakers ?? {})}`,
  available: () => {
    try {
      import.meta.resolve(SHERPA_PACKAGE);
      return true;
    } catch {
      return false;
    }
  },
  describe(s) {
    const configPath = s.config ?? `${s.path}.json`;
    const key = `${configPath}\u0000${JSON.stringify(s.speakers ?? {})}`;
    let d = described.get(key);
    if (d === undefined) {
      let ok = false;
      d = `piper voice ${basename(s.path).replace(/\.onnx$/i, '')} (sherpa-onnx)`;
      try {
        const config = parsePiperConfig(readFileSync(configPath, 'utf8'), configPath);
        const n = config.speakers;
        d += `, ${n} speaker${n === 1 ? '' : 's'}${n < PIPER_OPENAI_VOICES.length ? ' (fewer than the 13 voice names: some share one)' : ''}: ${describeSpeakers(speakerTable(config, s.speakers))}`;
        ok = true;
      } catch (e) {
        d += ` (${(e as Error).message})`;
      }
      // a voice still being pulled is described again once its files are there
      if (ok) described.set(key, d);
    }
    return d;
  },
  // its first model (pulled or configured) speaks the voices of tts-1, tts-1-hd and gpt-4o-mini-tts (src/audio/engines.ts)
  builtin: { voiceModel: true },
  create: {
    async speech(s, ctx) {
      const { createPiperEngine } = await import('./index.js');
      try {
        return await createPiperEngine({ modelPath: s.path, configPath: s.config, dataDir: s.data_dir, speakers: s.speakers });
      } catch (e) {
        // clients are told what is wrong without the server's paths; the operator reads them here
        ctx.log.warn({ err: e, model: s.name, path: s.path, data_dir: s.data_dir ?? ctx.env.PORTICO_ESPEAK_NG_DATA }, 'piper voice could not be loaded');
        throw e;
      }
    },
  },
});
