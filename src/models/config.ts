import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { Type, type Static } from 'typebox';
import { Ajv } from 'ajv';

/** One model entry of the YAML file named by PORTICO_CONFIG. */
export const ModelSpecSchema = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    provider: Type.Union([
      Type.Literal('openai-compatible'),
      Type.Literal('llama'),
      Type.Literal('flite'),
      Type.Literal('espeak'),
      Type.Literal('pocketsphinx'),
      Type.Literal('whisper'),
    ]),
    /** what the model does; inferred from the provider when omitted (openai-compatible: text) */
    type: Type.Optional(Type.Union([Type.Literal('text'), Type.Literal('speech'), Type.Literal('transcription')])),
    base_url: Type.Optional(Type.String({ pattern: '^https?://' })),
    api_key_env: Type.Optional(Type.String({ minLength: 1 })),
    upstream_model: Type.Optional(Type.String({ minLength: 1 })),
    api: Type.Optional(Type.Union([Type.Literal('chat.completions'), Type.Literal('responses')])),
    context_window: Type.Optional(Type.Integer({ minimum: 16 })),
    path: Type.Optional(Type.String({ minLength: 1 })),
    parallel: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 100 })),
    owned_by: Type.Optional(Type.String()),
    /** credits per million tokens / per audio second / per character, for the usage ledger and budgets */
    pricing: Type.Optional(
      Type.Object(
        {
          input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
          output_per_million: Type.Optional(Type.Number({ minimum: 0 })),
          cached_input_per_million: Type.Optional(Type.Number({ minimum: 0 })),
          per_audio_second: Type.Optional(Type.Number({ minimum: 0 })),
          per_character: Type.Optional(Type.Number({ minimum: 0 })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: true },
);
export type ModelSpec = Static<typeof ModelSpecSchema> & { type: 'text' | 'speech' | 'transcription' };

export const PorticoFileSchema = Type.Object(
  {
    models: Type.Optional(Type.Array(ModelSpecSchema)),
  },
  { additionalProperties: true },
);

export class ModelConfigError extends Error {}

const ajv = new Ajv({ allErrors: false, strict: false });
const validateFile = ajv.compile(PorticoFileSchema);

function inferType(p: Static<typeof ModelSpecSchema>['provider']): ModelSpec['type'] {
  if (p === 'flite' || p === 'espeak') return 'speech';
  if (p === 'pocketsphinx' || p === 'whisper') return 'transcription';
  return 'text';
}

/** Parses and validates the model configuration text; errors say which entry and field is wrong. */
export function parseModelConfig(text: string, source = 'PORTICO_CONFIG'): { models: ModelSpec[]; raw: Record<string, unknown> } {
  let doc: unknown;
  try {
    doc = parseYaml(text) ?? {};
  } catch (e) {
    throw new ModelConfigError(`${source}: not valid YAML: ${(e as Error).message}`);
  }
  if (!validateFile(doc)) {
    const e = validateFile.errors![0];
    throw new ModelConfigError(`${source}: ${e.instancePath || '(root)'} ${e.message}${e.params && 'allowedValues' in e.params ? ': ' + (e.params as any).allowedValues.join(', ') : ''}`);
  }
  const d = doc as Static<typeof PorticoFileSchema>;
  const seen = new Set<string>();
  const models: ModelSpec[] = [];
  for (const [i, m] of (d.models ?? []).entries()) {
    if (seen.has(m.name)) throw new ModelConfigError(`${source}: /models/${i} duplicates the model name "${m.name}"`);
    seen.add(m.name);
    if (m.provider === 'openai-compatible' && !m.base_url) throw new ModelConfigError(`${source}: /models/${i} (${m.name}) needs base_url for provider openai-compatible`);
    if ((m.provider === 'llama' || m.provider === 'whisper') && !m.path) throw new ModelConfigError(`${source}: /models/${i} (${m.name}) needs path (a model file) for provider ${m.provider}`);
    models.push({ ...m, type: m.type ?? inferType(m.provider) });
  }
  return { models, raw: d as Record<string, unknown> };
}

export function loadModelConfig(path: string | undefined): { models: ModelSpec[]; raw: Record<string, unknown> } {
  if (!path) return { models: [], raw: {} };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ModelConfigError(`PORTICO_CONFIG: cannot read ${path}: ${(e as Error).message}`);
  }
  return parseModelConfig(text, path);
}
