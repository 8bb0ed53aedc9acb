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
import type { MeteredUnit } from '../platform/module.js';
import { BreakerSchema, COMMON_KEYS, DEPLOYMENT_KEYS, HealthCheckSchema, ROUTING_KEYS, TimeoutsSchema, WEIGHT_KEY, type DeploymentSpec, type ModelSpec } from './spec.js';
import { ModelConfigError } from './config-error.js';

export type { ModelSpec } from './spec.js';

/** The environment the engines will read (`api_key_env`): given when the file is checked for serving. */
export type ModelEnv = Readonly<Record<string, string | undefined>>;

export interface CheckOptions {
  /**
   * Check what names the environment too (an `api_key_env` that is unset or empty is an error naming the
   * variable): `portico serve` at start and on a reload. Operator commands leave it out: they call no upstream.
   */
  env?: ModelEnv;
  /**
   * The units the features meter and their pricing keys (FeatureModule.units, collected by the runtime): a
   * `pricing.per_<unit>` key none of them declares is an error, and so is one on a model type it is not charged on.
   * Without them (operator commands, which charge nothing) any `per_<unit>` key is taken.
   */
  units?: readonly MeteredUnit[];
}

export { ModelConfigError };

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
  pricing: [...Object.keys(COMMON_KEYS.pricing.properties), 'per_<unit>'],
  timeouts: Object.keys(TimeoutsSchema.properties),
  breaker: Object.keys(BreakerSchema.properties),
  health_check: Object.keys(HealthCheckSchema.properties),
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
export function checkModelEntry(raw: unknown, where: string, opts: CheckOptions = {}): ModelSpec {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ModelConfigError(`${where}: each model must be a mapping with at least name and provider`);
  if ('deployments' in raw) return checkDeployments(raw as Record<string, unknown>, where, opts);
  return checkOne(raw as Record<string, unknown>, where, 'entry', opts);
}

function checkDeployments(entry: Record<string, unknown>, where: string, opts: CheckOptions): ModelSpec {
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
    const spec = checkOne({ ...(d as Record<string, unknown>), name, ...(entry.type !== undefined ? { type: entry.type } : {}) }, at, 'deployment', opts);
    const id = spec.id ?? `${name}#${i + 1}`;
    return { ...spec, id, name: id, weight: (spec as { weight?: number }).weight ?? 1, upstream_model: spec.upstream_model ?? name } as DeploymentSpec;
  });
  const types = new Set(deployments.map((d) => d.type));
  if (types.size > 1) throw new ModelConfigError(`${where}: every deployment must serve the same type; set 'type' on the model (got ${[...types].join(', ')})`);
  const first = deployments[0]!;
  if (deployments.length > 1 && !ROUTED.includes(first.type)) {
    throw new ModelConfigError(`${where}: a ${first.type} model takes one deployment: speech and transcription are not routed, so the others would never serve`);
  }
  const { deployments: _d, ...own } = entry;
  const { id: _id, weight: _w, ...firstKeys } = first;
  // the model-level keys are checked with the first deployment's provider keys (what the entry's spec carries)
  const { weight: _w0, ...rawFirst } = list[0] as Record<string, unknown>;
  const model = checkOne({ ...rawFirst, ...own, type: first.type }, where, 'entry', opts);
  return { ...firstKeys, ...model, name, upstream_model: first.upstream_model, deployments } as ModelSpec;
}

/** the types the router serves (deployments, retries, fallbacks, breakers, limits, per-try timeouts) */
/** the types whose models may have several deployments (a realtime session opens on the first that answers) */
const ROUTED: readonly Capability[] = ['text', 'embeddings', 'realtime'];

/** what each token pricing key is charged on, by model type (src/models/pricing.ts); units: what their features say */
const PRICED: Record<string, readonly string[]> = {
  input_per_million: ['text', 'embeddings'],
  output_per_million: ['text'],
  cached_input_per_million: ['text'],
  cache_write_input_per_million: ['text'],
  cache_write_1h_input_per_million: ['text'],
};

/**
 * The pricing of an entry against the units the features meter: a `per_<unit>` key must be one of theirs, on a
 * model type it is charged on; a token price on a type that has no such tokens is refused too (unless `unitsOnly`:
 * the serving runtime checks the unit prices of the models it was given once it knows the units).
 */
export function checkPricing(spec: Pick<ModelSpec, 'type' | 'pricing'>, units: readonly MeteredUnit[] | undefined, unitsOnly = false): string | undefined {
  for (const [k, v] of Object.entries(spec.pricing ?? {})) {
    if (v === undefined || (unitsOnly && k in PRICED)) continue;
    let on = PRICED[k];
    if (on === undefined && units !== undefined) {
      const unit = units.find((u) => u.price === k);
      if (!unit) {
        const prices = units.map((u) => u.price);
        const hint = closest(k, prices);
        return `unknown key 'pricing.${k}'${hint ? ` (did you mean '${hint}'?)` : ''}; allowed keys of pricing: ${list([...Object.keys(PRICED), ...prices])}`;
      }
      on = unit.on;
    }
    if (on && !on.includes(spec.type)) return `'pricing.${k}' applies to ${on.join(' and ')} models only (this one is ${spec.type}): it would never charge anything`;
  }
  return undefined;
}

/**
 * Rules across the keys every entry and deployment has, which the schema cannot say: keys that would do nothing
 * on this type or provider (accepted before without a word), and timeouts that contradict each other.
 */
function commonProblem(spec: ModelSpec, provider: Provider, kind: Kind, units: readonly MeteredUnit[] | undefined): string | undefined {
  if (kind === 'entry' && (spec.name !== spec.name.trim() || /[\u0000-\u001f\u007f]/.test(spec.name))) {
    return "'name' has spaces at an end or a control character: clients could not send it as written";
  }
  if (!ROUTED.includes(spec.type)) {
    const keys = [...Object.keys(DEPLOYMENT_KEYS).filter((k) => k !== 'id'), ...Object.keys(ROUTING_KEYS).filter((k) => k !== 'deployments')];
    const k = keys.find((x) => (spec as Record<string, unknown>)[x] !== undefined);
    if (k) return `'${k}' applies to text and embeddings models only: ${spec.type} models are not routed (no retries, limits, breaker or per-try timeouts)`;
  }
  if (kind === 'entry' && spec.pricing) {
    const problem = checkPricing(spec, units);
    if (problem) return problem;
  }
  const t = spec.timeouts;
  if (t) {
    if (t.connect_ms !== undefined && !provider.remote) return `'timeouts.connect_ms' applies to deployments that call a server (openai-compatible), not to ${provider.name}`;
    if (t.first_byte_ms !== undefined && t.total_ms !== undefined && t.first_byte_ms > t.total_ms) {
      return `'timeouts.first_byte_ms' (${t.first_byte_ms}) is longer than 'timeouts.total_ms' (${t.total_ms}): the first output must come within the whole try`;
    }
    for (const k of ['first_byte_ms', 'total_ms'] as const) {
      const v = t[k];
      if (t.connect_ms !== undefined && v !== undefined && t.connect_ms > v) {
        return `'timeouts.connect_ms' (${t.connect_ms}) is longer than 'timeouts.${k}' (${v}): opening the connection is part of it`;
      }
    }
  }
  return undefined;
}

function checkOne(entry: Record<string, unknown>, where: string, kind: Kind, opts: CheckOptions): ModelSpec {
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
  if (spec.health_check !== undefined && !provider.probes?.includes(type as Capability)) {
    throw new ModelConfigError(`${where}: 'health_check' needs an upstream that can be probed; provider ${providerName} (${type}) has no health check`);
  }
  const problem = provider.check?.(spec as never, opts.env) ?? commonProblem(spec, provider, kind, opts.units);
  if (problem) throw new ModelConfigError(`${where}: ${problem}`);
  return spec;
}

/** each model of a file, the entry as the file wrote it (the operators' list shows it: src/models/stored.ts) */
const RAW_ENTRIES = new WeakMap<ModelSpec, unknown>();

/** The entry a model file wrote for this model (undefined: not read from a file). */
export function rawEntryOf(spec: ModelSpec): unknown {
  return RAW_ENTRIES.get(spec);
}

/** Parses and checks the model file; errors say which entry and key is wrong. */
export function parseModelConfig(text: string, source = 'PORTICO_CONFIG', opts: CheckOptions = {}): { models: ModelSpec[] } {
  let doc: unknown;
  try {
    doc = parseYaml(text) ?? {};
  } catch (e) {
    // the parser's first line says what and where (line, column); the rest is a snippet of the file: one line is kept
    const first = ((e as Error).message.split('\n')[0] ?? '').replace(/:\s*$/, '');
    throw new ModelConfigError(`${source}: not valid YAML: ${first}`);
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
    const spec = checkModelEntry(raw, `${source}: models[${i}]${named}`, opts);
    RAW_ENTRIES.set(spec, raw);
    if (seen.has(spec.name)) {
      throw new ModelConfigError(
        `${source}: models[${i}] duplicates the model name "${spec.name}"; to serve one model from several servers, list them under 'deployments' of one entry (docs/models.md)`,
      );
    }
    seen.add(spec.name);
    // deployment ids name engines and usage records: unique across the file, and not another model's name (a
    // model without a deployments list keys its engine by its name and its health and records by its id)
    const keys = spec.deployments ?? [{ id: spec.id ?? spec.name }, ...(spec.id !== undefined && spec.id !== spec.name ? [{ id: spec.name }] : [])];
    for (const d of keys) {
      const other = ids.get(d.id);
      if (other !== undefined && other !== spec.name) throw new ModelConfigError(`${source}: models[${i}]: the deployment id "${d.id}" is used by the model "${other}" too`);
      if (ids.has(d.id) && other === spec.name && spec.deployments) throw new ModelConfigError(`${source}: models[${i}]: two deployments have the id "${d.id}"`);
      ids.set(d.id, spec.name);
    }
    models.push(spec);
  });
  const names = new Set(models.map((m) => m.name));
  for (const [i, m] of models.entries()) {
    for (const d of m.deployments ?? []) {
      if (d.id !== m.name && names.has(d.id)) throw new ModelConfigError(`${source}: models[${i}] (${m.name}): the deployment id "${d.id}" is the name of another model`);
    }
    for (const key of ['fallbacks', 'context_window_fallbacks'] as const) {
      const given = m[key] ?? [];
      const twice = given.find((f, j) => given.indexOf(f) !== j);
      if (twice !== undefined) throw new ModelConfigError(`${source}: models[${i}] (${m.name}): '${key}' names "${twice}" twice`);
      for (const f of given) {
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

export function loadModelConfig(path: string | undefined, opts: CheckOptions = {}): { models: ModelSpec[] } {
  if (!path) return { models: [] };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ModelConfigError(`PORTICO_CONFIG: cannot read ${path}: ${(e as Error).message}`);
  }
  return parseModelConfig(text, path, opts);
}
