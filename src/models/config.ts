/**
 * The model file (YAML, named by PORTICO_CONFIG). Strict: an unknown key is an error that names the key, the
 * entry and the keys that are allowed there (with the closest one when it looks like a typo); a wrong value
 * lists the allowed ones. A file that is not Portico's (a LiteLLM `model_list`) says so.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { Type, type TObject } from 'typebox';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { CAPABILITIES, type Capability, type Provider } from '../engines/provider.js';
import { PROVIDERS } from '../engines/providers.js';
import { BreakerSchema, COMMON_KEYS, DEPLOYMENT_KEYS, ROUTING_KEYS, TimeoutsSchema, WEIGHT_KEY, type DeploymentSpec, type ModelSpec } from './spec.js';

export type { ModelSpec } from './spec.js';

export class ModelConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelConfigError';
  }
}

const ajv = new Ajv({ allErrors: true, strict: false });
const entryValidators = new Map<string, ValidateFunction>();

/** an entry (name, provider and the rest), or one item of an entry's `deployments` list */
type Kind = 'entry' | 'deployment';

/** the model-level keys a deployment may not carry (they belong to the entry that lists it) */
const MODEL_ONLY = ['name', 'type', 'owned_by', 'pricing', ...Object.keys(ROUTING_KEYS)];

function keysOf(p: Provider, kind: Kind) {
  const { name, provider, type } = COMMON_KEYS;
  return kind === 'entry'
    ? { ...COMMON_KEYS, ...p.options.properties, ...DEPLOYMENT_KEYS, ...ROUTING_KEYS }
    : { name, provider, type, ...p.options.properties, ...DEPLOYMENT_KEYS, ...WEIGHT_KEY };
}

function entrySchema(p: Provider, kind: Kind): TObject {
  return Type.Object(keysOf(p, kind), { additionalProperties: false });
}

function validatorFor(p: Provider, kind: Kind): ValidateFunction {
  let v = entryValidators.get(`${kind}\u0000${p.name}`);
  if (!v) {
    v = ajv.compile(entrySchema(p, kind));
    entryValidators.set(`${kind}\u0000${p.name}`, v);
  }
  return v;
}

/** the keys of the nested mappings, for "unknown key" messages */
const NESTED: Record<string, string[]> = {
  pricing: Object.keys(COMMON_KEYS.pricing.properties),
  timeouts: Object.keys(TimeoutsSchema.properties),
  breaker: Object.keys(BreakerSchema.properties),
};

/** Levenshtein distance, for "did you mean" on a mistyped key. */
function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}

function closest(key: string, allowed: string[]): string | undefined {
  const norm = (s: string) => s.toLowerCase().replace(/[-_ ]/g, '');
  let best: string | undefined;
  let bestD = Infinity;
  for (const a of allowed) {
    const dd = norm(a) === norm(key) ? 0 : distance(key.toLowerCase(), a);
    if (dd < bestD) {
      best = a;
      bestD = dd;
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined;
}

const list = (xs: readonly string[]) => xs.join(', ');

function describe(e: ErrorObject, where: string, allowedKeys: string[], providerName: string): string {
  const path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'additionalProperties': {
      const key = String(params.additionalProperty);
      const at = path ? `${path}.${key}` : key;
      const allowed = path ? (NESTED[path] ?? allowedKeys) : allowedKeys;
      const hint = closest(key, allowed);
      return `${where}: unknown key '${at}'${path ? '' : ` for provider ${providerName}`}${hint ? ` (did you mean '${hint}'?)` : ''}; allowed keys${path ? ` of ${path}` : ''}: ${list(allowed)}`;
    }
    case 'required':
      return `${where}: '${String(params.missingProperty)}' is required for provider ${providerName}`;
    case 'enum':
      return `${where}: '${path}' must be one of: ${list((params.allowedValues as unknown[]).map(String))}`;
    case 'pattern':
      return `${where}: '${path}' must be an http:// or https:// URL`;
    case 'type':
      return `${where}: '${path}' must be ${params.type === 'integer' ? 'a whole number' : `a ${String(params.type)}`}`;
    case 'minimum':
      return `${where}: '${path}' must be at least ${String(params.limit)}`;
    case 'maximum':
      return `${where}: '${path}' must be at most ${String(params.limit)}`;
    case 'minLength':
      return `${where}: '${path}' must not be empty`;
    case 'maxLength':
      return `${where}: '${path}' must be at most ${String(params.limit)} characters`;
    case 'anyOf': {
      // a union of literals (e.g. api): list them
      return `${where}: '${path}' has a value that is not allowed`;
    }
    default:
      return `${where}: '${path}' ${e.message ?? 'is invalid'}`;
  }
}

function literalsOf(p: Provider, key: string): string[] | undefined {
  const s = ({ ...ROUTING_KEYS, ...p.options.properties } as Record<string, { anyOf?: Array<{ const?: unknown }> }>)[key];
  const values = s?.anyOf?.map((x) => x.const).filter((x): x is string => typeof x === 'string');
  return values?.length ? values : undefined;
}

/**
 * Checks one entry (from the file, or built by code) and gives the ModelSpec with its type filled in.
 * `where` names the entry in messages, e.g. `models.yaml: models[2] (gpt-4o)`. An entry with a `deployments`
 * list has no provider of its own: each deployment is checked against its provider's keys, and the spec is
 * the first deployment's keys under the entry's (see ModelSpec.deployments).
 */
export function checkModelEntry(raw: unknown, where: string): ModelSpec {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ModelConfigError(`${where}: each model must be a mapping with at least name and provider`);
  if ('deployments' in raw) return checkDeployments(raw as Record<string, unknown>, where);
  return checkOne(raw as Record<string, unknown>, where, 'entry');
}

function checkDeployments(entry: Record<string, unknown>, where: string): ModelSpec {
  const list = entry.deployments;
  if (!Array.isArray(list) || list.length === 0) throw new ModelConfigError(`${where}: 'deployments' must be a list of at least one deployment`);
  if (list.length > 100) throw new ModelConfigError(`${where}: 'deployments' may list at most 100 deployments`);
  const modelKeys = [...MODEL_ONLY];
  for (const k of Object.keys(entry)) {
    if (modelKeys.includes(k)) continue;
    const hint = closest(k, modelKeys);
    const why = k in DEPLOYMENT_KEYS || k === 'provider' || k === 'weight' ? ` ('${k}' goes in each deployment)` : hint ? ` (did you mean '${hint}'?)` : '';
    throw new ModelConfigError(`${where}: unknown key '${k}' for a model with deployments${why}; allowed keys: ${modelKeys.join(', ')}`);
  }
  if (typeof entry.name !== 'string') throw new ModelConfigError(`${where}: 'name' is required`);
  const name = entry.name;
  const deployments: DeploymentSpec[] = list.map((d, i) => {
    const at = `${where}.deployments[${i}]`;
    if (d === null || typeof d !== 'object' || Array.isArray(d)) throw new ModelConfigError(`${at}: each deployment must be a mapping with at least provider`);
    for (const k of Object.keys(d)) {
      if (MODEL_ONLY.includes(k)) throw new ModelConfigError(`${at}: '${k}' belongs to the model, not to one deployment`);
    }
    const spec = checkOne({ ...(d as Record<string, unknown>), name, ...(entry.type !== undefined ? { type: entry.type } : {}) }, at, 'deployment');
    const id = spec.id ?? `${name}#${i + 1}`;
    return { ...spec, id, name: id, weight: (spec as { weight?: number }).weight ?? 1, upstream_model: spec.upstream_model ?? name } as DeploymentSpec;
  });
  const types = new Set(deployments.map((d) => d.type));
  if (types.size > 1) throw new ModelConfigError(`${where}: every deployment must serve the same type; set 'type' on the model (got ${[...types].join(', ')})`);
  const { deployments: _d, ...own } = entry;
  const first = deployments[0]!;
  const { id: _id, weight: _w, ...firstKeys } = first;
  // the model-level keys are checked with the first deployment's provider keys (what the entry's spec carries)
  const { weight: _w0, ...rawFirst } = list[0] as Record<string, unknown>;
  const model = checkOne({ ...rawFirst, ...own, type: first.type }, where, 'entry');
  return { ...firstKeys, ...model, name, upstream_model: first.upstream_model, deployments } as ModelSpec;
}

function checkOne(entry: Record<string, unknown>, where: string, kind: Kind): ModelSpec {
  const providerName = entry.provider;
  if (typeof providerName !== 'string' || !PROVIDERS.has(providerName)) {
    throw new ModelConfigError(
      `${where}: ${providerName === undefined ? "'provider' is required" : `unknown provider ${JSON.stringify(providerName)}`}; one of: ${list([...PROVIDERS.keys()])}`,
    );
  }
  const provider = PROVIDERS.get(providerName)!;
  const allowedKeys = Object.keys(keysOf(provider, kind)).filter((k) => kind === 'entry' || !MODEL_ONLY.includes(k));
  const validate = validatorFor(provider, kind);
  if (!validate(entry)) {
    const errors = validate.errors ?? [];
    // the most useful error first: unknown keys (typos), then missing ones, then values
    const order = ['additionalProperties', 'required', 'enum', 'anyOf', 'type'];
    const e = [...errors].sort((a, b) => (order.indexOf(a.keyword) + 1 || 99) - (order.indexOf(b.keyword) + 1 || 99))[0]!;
    if (e.keyword === 'anyOf' || (e.keyword === 'const' && e.instancePath)) {
      const key = e.instancePath.replace(/^\//, '');
      const values = literalsOf(provider, key);
      if (values) throw new ModelConfigError(`${where}: '${key}' must be one of: ${list(values)}`);
    }
    throw new ModelConfigError(describe(e, where, allowedKeys, providerName));
  }
  const type = (entry.type ?? provider.serves[0]) as string;
  if (!(CAPABILITIES as readonly string[]).includes(type) || !(provider.serves as readonly string[]).includes(type)) {
    throw new ModelConfigError(`${where}: 'type' must be one of: ${list(provider.serves)} for provider ${providerName} (got ${JSON.stringify(entry.type)})`);
  }
  const spec = { ...entry, type: type as Capability } as ModelSpec;
  const problem = provider.check?.(spec as never);
  if (problem) throw new ModelConfigError(`${where}: ${problem}`);
  return spec;
}

/** Parses and checks the model file; errors say which entry and key is wrong. */
export function parseModelConfig(text: string, source = 'PORTICO_CONFIG'): { models: ModelSpec[] } {
  let doc: unknown;
  try {
    doc = parseYaml(text) ?? {};
  } catch (e) {
    throw new ModelConfigError(`${source}: not valid YAML: ${(e as Error).message}`);
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw new ModelConfigError(`${source}: the file must be a mapping with a 'models' list`);
  const top = doc as Record<string, unknown>;
  for (const k of Object.keys(top)) {
    if (k === 'models') continue;
    if (k === 'model_list') {
      throw new ModelConfigError(`${source}: 'model_list' is LiteLLM's key; Portico reads a 'models' list with name, provider and the provider's keys (see docs/models.md)`);
    }
    throw new ModelConfigError(`${source}: unknown top-level key '${k}'${closest(k, ['models']) ? " (did you mean 'models'?)" : ''}; the file has one key: models`);
  }
  const entries = top.models ?? [];
  if (!Array.isArray(entries)) throw new ModelConfigError(`${source}: 'models' must be a list`);
  const seen = new Set<string>();
  const ids = new Map<string, string>();
  const models: ModelSpec[] = [];
  entries.forEach((raw, i) => {
    const named = raw && typeof raw === 'object' && typeof (raw as { name?: unknown }).name === 'string' ? ` (${(raw as { name: string }).name})` : '';
    const spec = checkModelEntry(raw, `${source}: models[${i}]${named}`);
    if (seen.has(spec.name)) {
      throw new ModelConfigError(
        `${source}: models[${i}] duplicates the model name "${spec.name}"; to serve one model from several servers, list them under 'deployments' of one entry (docs/models.md)`,
      );
    }
    seen.add(spec.name);
    // deployment ids name engines and usage records: unique across the file, and not another model's name
    for (const d of spec.deployments ?? [{ id: spec.id ?? spec.name }]) {
      const other = ids.get(d.id);
      if (other !== undefined && other !== spec.name) throw new ModelConfigError(`${source}: models[${i}]: the deployment id "${d.id}" is used by the model "${other}" too`);
      if (ids.has(d.id) && other === spec.name && spec.deployments) throw new ModelConfigError(`${source}: models[${i}]: two deployments have the id "${d.id}"`);
      ids.set(d.id, spec.name);
    }
    models.push(spec);
  });
  for (const [i, m] of models.entries()) {
    for (const key of ['fallbacks', 'context_window_fallbacks'] as const) {
      for (const f of m[key] ?? []) {
        const target = models.find((x) => x.name === f);
        if (f === m.name) throw new ModelConfigError(`${source}: models[${i}] (${m.name}): '${key}' names the model itself`);
        if (!target)
          throw new ModelConfigError(`${source}: models[${i}] (${m.name}): '${key}' names "${f}", which is not a model of this file; models: ${list(models.map((x) => x.name))}`);
        if (target.type !== m.type) throw new ModelConfigError(`${source}: models[${i}] (${m.name}): '${key}' names "${f}", a ${target.type} model, not a ${m.type} one`);
      }
    }
  }
  return { models };
}

export function loadModelConfig(path: string | undefined): { models: ModelSpec[] } {
  if (!path) return { models: [] };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ModelConfigError(`PORTICO_CONFIG: cannot read ${path}: ${(e as Error).message}`);
  }
  return parseModelConfig(text, path);
}
