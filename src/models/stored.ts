/**
 * Models and deployments added at run time (issue 25): model-file entries an operator gives through the admin API,
 * kept in the database (table stored_models) and served by every instance as the registry's `stored` layer, after
 * the model file's models and before the pulled and built-in ones.
 *
 * - An entry is checked by the model file's own checker (config.ts, checkModelEntry: every provider's keys, did you
 *   mean, pricing against the features' units), plus `api_key`: the upstream key itself, write-only, on an
 *   openai-compatible entry or deployment. It is kept apart from the entry, sealed (platform/secrets.ts), and handed
 *   to the engine on the entry object (engines/provider.ts, STORED_SECRET), never as an environment variable; the
 *   model file still refuses a clear `api_key`.
 * - Every change is written to the database first, then applied here and told to the other instances through the
 *   change feed (channel `models`); each reads the table again and applies it the way a reload of the model file is
 *   applied (compose/models.ts, applyLayer): engines of changed deployments retired once their requests finish,
 *   their health forgotten, stale entries refused with a retryable 503. A feed that reconnects reads it again too
 *   (a message may have been lost), and so does every start: stored models survive restarts.
 * - A row whose secret does not decrypt (PORTICO_SECRETS_KEY changed) is still served by name, but answers 503
 *   saying why; its engine is never made, so nothing is sent upstream without the key.
 */
import { createHash } from 'node:crypto';
import type { Db } from '../platform/db/index.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';
import { AppError, msg, type Texts } from '../platform/errors.js';
import type { MeteredUnit } from '../platform/module.js';
import { SecretBox, SecretError } from '../platform/secrets.js';
import { withStoredSecret, type Provider, type ProviderContext } from '../engines/provider.js';
import { PROVIDERS } from '../engines/providers.js';
import { EngineError, type EmbeddingsEngine, type TextEngine } from '../engines/types.js';
import type { EngineRegistry } from '../engines/registry.js';
import { checkModelEntry, ModelConfigError, rawEntryOf, type ModelEnv } from './config.js';
import { LAYERS, type ModelLayer, type ModelRegistry } from './registry.js';
import { deploymentName, upstreamName, type DeploymentSpec, type ModelSpec } from './spec.js';

/** the feed channel that tells every instance the stored models changed */
export const MODELS_CHANNEL = 'models';
/** a test request waits at most this long when the deployment's timeouts say nothing shorter */
export const TEST_TIMEOUT_MS = 20_000;
/** the longest api_key accepted */
const MAX_SECRET = 4096;

/** Where a model comes from, as the operators' list says it. */
export type ModelSource = 'file' | 'stored' | 'pulled' | 'builtin';
const SOURCE: Record<ModelLayer, ModelSource> = { configured: 'file', stored: 'stored', pulled: 'pulled', builtin: 'builtin' };

export interface StoredRow {
  name: string;
  /** the model-file entry, without its api_key values */
  entry: Record<string, unknown>;
  /**
   * each secret, sealed: `api_key` (a model without a `deployments` list) or `deployment:<id>` (the deployment of that
   * id); rows written before keys followed ids have `deployments.<index>.api_key` (read by secretsOf, never written)
   */
  secrets: Record<string, string>;
  enabled: boolean;
  created_at: number;
  updated_at: number;
  updated_by: string;
}

/** SQL of the stored models. Nothing else writes the table. */
export class StoredModelStore {
  constructor(private readonly db: Db) {}

  private static row(r: { name: string; entry: string; secrets: string; enabled: boolean; created_at: number; updated_at: number; updated_by: string }): StoredRow {
    return {
      name: r.name,
      entry: JSON.parse(r.entry) as Record<string, unknown>,
      secrets: JSON.parse(r.secrets) as Record<string, string>,
      enabled: Boolean(r.enabled),
      created_at: Number(r.created_at),
      updated_at: Number(r.updated_at),
      updated_by: r.updated_by,
    };
  }

  async list(): Promise<StoredRow[]> {
    return (await this.db.selectFrom('stored_models').selectAll().orderBy('name').execute()).map(StoredModelStore.row);
  }

  async get(name: string): Promise<StoredRow | undefined> {
    const r = await this.db.selectFrom('stored_models').selectAll().where('name', '=', name).executeTakeFirst();
    return r && StoredModelStore.row(r);
  }

  /** undefined: the name is taken (another operator made it meanwhile) */
  async insert(row: StoredRow): Promise<StoredRow | undefined> {
    const r = await this.db
      .insertInto('stored_models')
      .values({ ...row, entry: JSON.stringify(row.entry), secrets: JSON.stringify(row.secrets) })
      .onConflict((oc) => oc.column('name').doNothing())
      .returningAll()
      .executeTakeFirst();
    return r && StoredModelStore.row(r);
  }

  async update(name: string, set: Partial<Pick<StoredRow, 'entry' | 'secrets' | 'enabled'>> & { updated_at: number; updated_by: string }): Promise<StoredRow | undefined> {
    const r = await this.db
      .updateTable('stored_models')
      .set({
        ...(set.entry !== undefined ? { entry: JSON.stringify(set.entry) } : {}),
        ...(set.secrets !== undefined ? { secrets: JSON.stringify(set.secrets) } : {}),
        ...(set.enabled !== undefined ? { enabled: set.enabled } : {}),
        updated_at: set.updated_at,
        updated_by: set.updated_by,
      })
      .where('name', '=', name)
      .returningAll()
      .executeTakeFirst();
    return r && StoredModelStore.row(r);
  }

  async remove(name: string): Promise<StoredRow | undefined> {
    const r = await this.db.deleteFrom('stored_models').where('name', '=', name).returningAll().executeTakeFirst();
    return r && StoredModelStore.row(r);
  }
}

/** One model as the operators' list shows it (docs/api.md, "Models and deployments"). */
export interface ModelItem {
  name: string;
  type: string;
  source: ModelSource;
  read_only: boolean;
  enabled: boolean;
  /** the model-file entry as stored or read, without its secrets */
  entry: Record<string, unknown>;
  /** the places that hold a secret: `{ "api_key": true }`, `{ "deployments.<id>.api_key": true }` */
  secrets: Record<string, true>;
  updated_at: number | null;
  updated_by: string | null;
  /** why it is not served as it stands (a stored entry the checker now refuses, a secret that does not decrypt, a missing file); null: none */
  error: string | null;
}

/** What the last read of the table gave for one row. */
interface Built {
  row: StoredRow;
  spec?: ModelSpec;
  /** the checker refused the entry as it is stored now (an api_key_env no longer set, a unit no feature meters) */
  error?: string;
  /** a secret that does not decrypt: the model answers 503 with this */
  secretError?: Texts;
}

/**
 * A secret given with an entry: its place (`api_key`, `deployments.<id>.api_key`), and the key (null: remove the one
 * stored there).
 */
export interface GivenSecrets {
  entry: Record<string, unknown>;
  secrets: Map<string, string | null>;
}

/** A secret as stored: the row's key, the sealed value and the context that opens it. */
export interface HeldSecret {
  rowKey: string;
  sealed: string;
  context: string;
  /** the origin of the base_url it was given for (null: none, or not a URL) */
  origin: string | null;
}

/** A place of an entry that may hold a stored key now: a provider that stores keys (Provider.storesKey), no api_key_env, and (in a list) an id. */
export interface SecretSlot {
  /** as the answer names it: `api_key` or `deployments.<id>.api_key` */
  place: string;
  /** as the entry's path names it (`api_key`, `deployments.<index>.api_key`), for a 400's param */
  path: string;
  rowKey: string;
  origin: string | null;
  /** the entry's key its origin is of (base_url, or the provider's Provider.urlKey) */
  urlKey: string;
}

/** The origin of a base_url (scheme, host, port): what a stored key is bound to besides its deployment. */
export function originOf(url: unknown): string | null {
  if (typeof url !== 'string') return null;
  try {
    const o = new URL(url).origin;
    return o === 'null' ? null : o;
  } catch {
    return null;
  }
}

/** the providers whose entries may hold a stored upstream key (Provider.storesKey) */
const KEYED = [...PROVIDERS.values()].filter((p) => p.storesKey === true).map((p) => p.name);
const keyed = (provider: unknown) => typeof provider === 'string' && PROVIDERS.get(provider)?.storesKey === true;
/** the origin of the upstream an entry or deployment calls: of its provider's address key (Provider.urlKey, default base_url) */
export const urlKeyOf = (o: Record<string, unknown>) => (typeof o.provider === 'string' && PROVIDERS.get(o.provider)?.urlKey) || 'base_url';
const upstreamOf = (o: Record<string, unknown>) => originOf(o[urlKeyOf(o)]);

/** the row's key and the sealing context of a deployment's secret (its id) or a model's own (no list) */
const rowKeyOf = (id: string | undefined) => (id === undefined ? 'api_key' : `deployment:${id}`);
const placeOf = (id: string | undefined) => (id === undefined ? 'api_key' : `deployments.${id}.api_key`);
const contextOf = (name: string, rowKey: string) => `model:${name}\u0000${rowKey}`;
/** a row written before keys followed ids: the place by index */
const BY_INDEX = /^deployments\.(\d+)\.api_key$/;

/**
 * The secrets of a row by place (`api_key`, `deployments.<id>.api_key`). A row of the earlier format (places by
 * index) is read by the id its entry gave that index then (the row's entry and secrets were written together);
 * such a secret still opens with the context it was sealed with. A deployment without an id of its own is named
 * `<name>#<n>` (by its index), so its key is served but never kept by a later change (`written` false).
 */
export function secretsOf(row: StoredRow): Map<string, HeldSecret & { written: boolean }> {
  const out = new Map<string, HeldSecret & { written: boolean }>();
  const list = Array.isArray(row.entry.deployments) ? (row.entry.deployments as unknown[]) : undefined;
  for (const [rowKey, sealed] of Object.entries(row.secrets)) {
    const context = contextOf(row.name, rowKey);
    if (rowKey === 'api_key') {
      if (!list) out.set('api_key', { rowKey, sealed, context, origin: upstreamOf(row.entry), written: true });
      continue;
    }
    if (rowKey.startsWith('deployment:')) {
      const id = rowKey.slice('deployment:'.length);
      const d = list?.find((x) => isObject(x) && x.id === id);
      if (isObject(d)) out.set(placeOf(id), { rowKey, sealed, context, origin: upstreamOf(d), written: true });
      continue;
    }
    const i = Number(BY_INDEX.exec(rowKey)?.[1]);
    const d = Number.isInteger(i) ? list?.[i] : undefined;
    if (!isObject(d)) continue;
    const written = typeof d.id === 'string';
    const id = written ? (d.id as string) : `${row.name}#${i + 1}`;
    out.set(placeOf(id), { rowKey, sealed, context, origin: upstreamOf(d), written });
  }
  return out;
}

/** What a test request answered (POST /v1/admin/models/{name}/test). */
export interface TestResult {
  ok: boolean;
  model: string;
  deployment: string;
  latency_ms: number;
  output?: string;
  error?: { code: string; message: string };
}

export interface StoredModelsOptions {
  store: StoredModelStore;
  box: SecretBox;
  models: ModelRegistry;
  /** serves the enabled, checked stored models (compose/models.ts: applied as a reload of the model file is) */
  apply: (specs: ModelSpec[]) => Promise<{ added: string[]; removed: string[]; changed: string[] }>;
  feed?: ChangeFeed;
  /** the environment the engines read (an entry's api_key_env is checked in it) */
  env: ModelEnv;
  /** the units the features meter (an entry's `pricing.per_<unit>` keys are checked against them) */
  units: () => readonly MeteredUnit[] | undefined;
  log: { info(o: object, m?: string): void; warn(o: object, m?: string): void; error(o: object, m?: string): void };
  /** for test requests: the providers and what their factories get, and the shared engines (embedded ones) */
  providers: ReadonlyMap<string, Provider>;
  ctx: ProviderContext;
  engines: EngineRegistry;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const invalid = (reason: string, param = 'entry') => new AppError('invalid_model_entry', msg('model_entry_invalid', { reason }), param);
/** how a message names where a model comes from */
export const SOURCE_TEXT: Record<ModelSource, Texts> = {
  file: { en: 'a model of the model file', zh: '模型文件中的模型' },
  stored: { en: 'a stored model', zh: '已存储的模型' },
  pulled: { en: 'a pulled model', zh: '已拉取的模型' },
  builtin: { en: 'a built-in model', zh: '内置模型' },
};

/** The deployment ids of a model (a model without a list: its id, or its name). */
function deploymentIds(spec: ModelSpec): string[] {
  return spec.deployments?.map((d) => d.id) ?? [spec.id ?? spec.name];
}

/** The stored models of this instance: read from the table, checked, served, and changed by the admin API. */
export class StoredModels {
  private built = new Map<string, Built>();
  /** the stored models marked unavailable because their key does not decrypt */
  private unreadable = new Set<string>();
  private tail: Promise<unknown> = Promise.resolve();
  private queued?: Promise<void>;

  constructor(private readonly o: StoredModelsOptions) {}

  /** the table (the admin API writes it, then calls refresh and announce) */
  get store(): StoredModelStore {
    return this.o.store;
  }

  /** Hears the other instances' changes (and reads the table again after the feed was away). */
  listen(): Promise<void> {
    this.o.feed?.onResync(() => void this.refresh().catch(() => {}));
    return this.o.feed?.subscribe(MODELS_CHANNEL, () => void this.refresh().catch(() => {})) ?? Promise.resolve();
  }

  /**
   * Reads the table and serves what it holds now. Calls run one after another, and a call made while one waits to
   * start joins it: a read that starts after a write sees it.
   */
  refresh(): Promise<void> {
    if (this.queued) return this.queued;
    const p = this.tail.then(() => {
      this.queued = undefined;
      return this.load();
    });
    this.queued = p;
    this.tail = p.catch(() => {});
    return p;
  }

  /** Tells every other instance to read the table again (this one has). */
  async announce(): Promise<void> {
    await this.o.feed
      ?.publish(MODELS_CHANNEL, { at: Date.now() })
      .catch((e) => this.o.log.warn({ err: (e as Error).message }, 'stored models change not broadcast; other instances read it at their next change or restart'));
  }

  private async load(): Promise<void> {
    let rows: StoredRow[];
    try {
      rows = await this.o.store.list();
    } catch (e) {
      this.o.log.error({ err: (e as Error).message }, 'the stored models could not be read; the last ones read keep serving');
      throw e;
    }
    const built = new Map<string, Built>();
    for (const row of rows) built.set(row.name, this.build(row));
    const served = [...built.values()].filter((b) => b.row.enabled && b.spec).map((b) => b.spec!);
    const change = await this.o.apply(served);
    const previous = this.built;
    this.built = built;
    // a served model whose key does not decrypt answers 503 saying why; one that no longer has that problem is
    // cleared (only what was marked here: a missing model file is the file check's to clear)
    const unreadable = new Set<string>();
    for (const b of built.values()) {
      if (b.secretError && b.row.enabled && this.o.models.layerOf(b.row.name) === 'stored') {
        this.o.models.setUnavailable(b.row.name, b.secretError.en, b.secretError);
        unreadable.add(b.row.name);
      }
    }
    for (const name of this.unreadable) if (!unreadable.has(name) && this.o.models.layerOf(name) !== 'configured') this.o.models.setUnavailable(name, undefined);
    this.unreadable = unreadable;
    // said once, when it starts (every change anywhere reads the table again)
    for (const b of built.values()) {
      const was = previous.get(b.row.name);
      if (b.error && b.error !== was?.error) this.o.log.warn({ model: b.row.name }, `the stored model '${b.row.name}' is not served: ${b.error}`);
      if (b.secretError && b.secretError.en !== was?.secretError?.en) this.o.log.warn({ model: b.row.name }, b.secretError.en);
    }
    if (change.added.length || change.removed.length || change.changed.length) {
      this.o.log.info({ added: change.added, removed: change.removed, changed: change.changed }, 'stored models applied');
    }
  }

  /** A row as a spec to serve: checked as the model file is, its secrets opened and put on the engine objects. */
  private build(row: StoredRow): Built {
    let spec: ModelSpec;
    try {
      spec = this.check(row.entry);
    } catch (e) {
      return { row, error: e instanceof AppError || e instanceof ModelConfigError ? e.message : String(e) };
    }
    let secretError: Texts | undefined;
    for (const [place, { sealed, context }] of secretsOf(row)) {
      const version = createHash('sha256').update(sealed).digest('base64url').slice(0, 16);
      let secret: { apiKey?: string; error?: string; version: string };
      try {
        secret = { apiKey: this.o.box.open(sealed, context), version };
      } catch (e) {
        const why = e instanceof SecretError ? e.message : 'it does not decrypt';
        secretError = msg('model_secret_unreadable', { name: row.name, why });
        secret = { error: secretError.en, version };
      }
      for (const target of targetsOf(spec, place)) withStoredSecret(target, secret);
    }
    return { row, spec, secretError };
  }

  /**
   * Checks an entry (without its api_key values) as the model file's checker does, plus what a file checks across
   * its entries: fallbacks name served models of the same type. Throws 400 invalid_model_entry with the checker's message.
   */
  check(entry: Record<string, unknown>): ModelSpec {
    const name = typeof entry.name === 'string' ? entry.name : undefined;
    const where = name ? `entry (${name})` : 'entry';
    let spec: ModelSpec;
    try {
      spec = checkModelEntry(entry, where, { env: this.o.env, units: this.o.units() });
    } catch (e) {
      if (e instanceof ModelConfigError) throw invalid(e.message);
      throw e;
    }
    if (spec.deployments) {
      const ids = spec.deployments.map((d) => d.id);
      const twice = ids.find((id, i) => ids.indexOf(id) !== i);
      if (twice !== undefined) throw invalid(`${where}: two deployments have the id "${twice}"`);
    }
    for (const key of ['fallbacks', 'context_window_fallbacks'] as const) {
      const given = spec[key] ?? [];
      const twice = given.find((f, j) => given.indexOf(f) !== j);
      if (twice !== undefined) throw invalid(`${where}: '${key}' names "${twice}" twice`);
      for (const f of given) {
        if (f === spec.name) throw invalid(`${where}: '${key}' names the model itself`);
        const target = this.o.models.get(f);
        if (!target) throw invalid(`${where}: '${key}' names "${f}", which is not a model Portico serves`);
        if (target.type !== spec.type) throw invalid(`${where}: '${key}' names "${f}", a ${target.type} model, not a ${spec.type} one`);
      }
    }
    return spec;
  }

  /**
   * Takes the `api_key` values out of an entry an operator gave: each on an entry or deployment of a provider that stores keys (Provider.storesKey),
   * a string (the key) or null (remove the stored one), by the place it belongs to: `api_key` for an entry without
   * a list, `deployments.<id>.api_key` for a deployment (a key follows its deployment by id, never by index, so a
   * deployment of a list given a key needs an `id` of its own). 400 for any other place or value.
   */
  takeSecrets(raw: unknown): GivenSecrets {
    if (!isObject(raw)) throw invalid('entry: must be a mapping with at least name and provider');
    const entry: Record<string, unknown> = { ...raw };
    const secrets = new Map<string, string | null>();
    const take = (obj: Record<string, unknown>, path: string, place: string | undefined, provider: unknown) => {
      if (!('api_key' in obj)) return;
      const at = path;
      const v = obj.api_key;
      delete obj.api_key;
      if (v !== null && (typeof v !== 'string' || v.trim() === '' || v.length > MAX_SECRET || /[\s\u0000-\u001f\u007f]/.test(v))) {
        throw invalid(`entry: '${at}' must be the upstream's key (1-${MAX_SECRET} characters without spaces), or null to remove the stored one`, `entry.${at}`);
      }
      if (!keyed(provider)) throw invalid(`entry: '${at}' applies to deployments of ${KEYED.join(' and ')} only`, `entry.${at}`);
      if (v !== null && obj.api_key_env !== undefined) throw invalid(`entry: '${at}' and 'api_key_env' both give the upstream's key: keep one`, `entry.${at}`);
      // a deployment without an id holds no key (none is kept for it): null has nothing to remove
      if (place === undefined && v === null) return;
      if (place === undefined) {
        throw invalid(
          `entry: '${at}' needs the deployment's own 'id': a stored key follows its deployment by id (one without an id is named by its index, which changes when the list does)`,
          `entry.${at.replace(/api_key$/, 'id')}`,
        );
      }
      secrets.set(place, v as string | null);
    };
    if (Array.isArray(entry.deployments)) {
      if ('api_key' in entry) throw invalid("entry: 'api_key' goes in each deployment of a model with deployments", 'entry.api_key');
      entry.deployments = entry.deployments.map((d, i) => {
        if (!isObject(d)) return d;
        const copy = { ...d };
        const id = copy.id === undefined || copy.id === null ? undefined : String(copy.id);
        take(copy, `deployments.${i}.api_key`, id === undefined ? undefined : placeOf(id), copy.provider);
        return copy;
      });
    } else take(entry, 'api_key', 'api_key', entry.provider);
    return { entry, secrets };
  }

  /** The places of a (checked) entry that may hold a stored key now. */
  static slotsOf(entry: Record<string, unknown>): SecretSlot[] {
    const ok = (o: unknown): o is Record<string, unknown> => isObject(o) && keyed(o.provider) && o.api_key_env === undefined;
    if (Array.isArray(entry.deployments)) {
      return entry.deployments.flatMap((d, i) =>
        ok(d) && typeof d.id === 'string' ? [{ place: placeOf(d.id), path: `deployments.${i}.api_key`, rowKey: rowKeyOf(d.id), origin: upstreamOf(d), urlKey: urlKeyOf(d) }] : [],
      );
    }
    return ok(entry) ? [{ place: 'api_key', path: 'api_key', rowKey: rowKeyOf(undefined), origin: upstreamOf(entry), urlKey: urlKeyOf(entry) }] : [];
  }

  /** A key sealed for a place of a model: it opens only there (another model, another deployment id: it does not). */
  seal(name: string, slot: Pick<SecretSlot, 'rowKey'>, key: string): string {
    return this.o.box.seal(key, contextOf(name, slot.rowKey));
  }

  /** A held secret sealed again for another row key (a row of the earlier format, changed: written by id now). */
  reseal(name: string, held: HeldSecret, slot: Pick<SecretSlot, 'rowKey'>): string {
    if (held.context === contextOf(name, slot.rowKey)) return held.sealed;
    return this.seal(name, slot, this.o.box.open(held.sealed, held.context));
  }

  /**
   * 409 conflict when the name, or a deployment id, is another model's: any layer's (a model of the file hidden by
   * nothing, a pulled or built-in one) or another stored row's.
   */
  async assertFree(spec: ModelSpec, creating: boolean): Promise<void> {
    const rows = await this.o.store.list();
    if (creating) {
      for (const layer of LAYERS) {
        if (this.o.models.layer(layer).some((s) => s.name === spec.name)) {
          throw new AppError('conflict', msg('model_name_taken', { name: spec.name, source: SOURCE_TEXT[SOURCE[layer]] }), 'entry.name');
        }
      }
      if (rows.some((r) => r.name === spec.name)) throw new AppError('conflict', msg('model_name_taken', { name: spec.name, source: SOURCE_TEXT.stored }), 'entry.name');
    }
    const others: ModelSpec[] = [...LAYERS.flatMap((l) => this.o.models.layer(l)), ...[...this.built.values()].flatMap((b) => (b.spec ? [b.spec] : []))].filter(
      (s) => s.name !== spec.name,
    );
    const mine = new Set(deploymentIds(spec).filter((id) => id !== spec.name));
    for (const other of others) {
      const theirs = new Set([other.name, ...deploymentIds(other)]);
      for (const id of mine) if (theirs.has(id)) throw new AppError('conflict', msg('model_deployment_taken', { id, model: other.name }), 'entry.deployments');
      if (deploymentIds(other).includes(spec.name) && other.name !== spec.name) {
        throw new AppError('conflict', msg('model_deployment_taken', { id: spec.name, model: other.name }), 'entry.name');
      }
    }
  }

  /** The row of a stored model, or 404 for an unknown name and 409 read_only for a model from elsewhere. */
  async writable(name: string): Promise<StoredRow> {
    const row = await this.o.store.get(name);
    if (row) return row;
    const layer = this.o.models.layerOf(name);
    if (layer && layer !== 'stored') {
      const source = SOURCE[layer];
      const how: Texts =
        source === 'file'
          ? { en: 'change it in the model file (PORTICO_CONFIG) and reload', zh: '请在模型文件（PORTICO_CONFIG）中修改并重新加载' }
          : source === 'pulled'
            ? { en: 'it is managed with `portico models pull` and `portico models rm`', zh: '它由 `portico models pull` 和 `portico models rm` 管理' }
            : { en: 'add a model of another name instead', zh: '请改为添加其他名称的模型' };
      throw new AppError('read_only', msg('model_read_only', { name, source: SOURCE_TEXT[source], how }), 'name');
    }
    throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
  }

  /** Every model this instance serves, and every stored one (disabled, refused or hidden included). */
  list(): ModelItem[] {
    const out: ModelItem[] = [];
    const { models } = this.o;
    for (const spec of models.list()) {
      const layer = models.layerOf(spec.name);
      if (!layer || layer === 'stored') continue;
      const source = SOURCE[layer];
      out.push({
        name: spec.name,
        type: spec.type,
        source,
        read_only: true,
        enabled: true,
        entry: entryOf(spec),
        secrets: {},
        updated_at: null,
        updated_by: null,
        error: models.unavailableReason(spec.name) ?? null,
      });
    }
    for (const b of [...this.built.values()].sort((a, c) => (a.row.name < c.row.name ? -1 : 1))) out.push(this.itemOf(b));
    const order = (s: ModelSource) => ['file', 'stored', 'pulled', 'builtin'].indexOf(s);
    return out.sort((a, c) => order(a.source) - order(c.source));
  }

  /** One stored model as listed (after the table was read again). */
  item(name: string): ModelItem | undefined {
    const b = this.built.get(name);
    return b && this.itemOf(b);
  }

  private itemOf(b: Built): ModelItem {
    const { row } = b;
    // a model of the file with the same name (added to the file later) is served instead
    const hidden = this.o.models.layerOf(row.name) === 'configured';
    return {
      name: row.name,
      type: b.spec?.type ?? (typeof row.entry.type === 'string' ? row.entry.type : (this.o.providers.get(String(row.entry.provider))?.serves[0] ?? 'text')),
      source: 'stored',
      read_only: false,
      enabled: row.enabled,
      entry: row.entry,
      secrets: Object.fromEntries([...secretsOf(row).keys()].map((k) => [k, true as const])),
      updated_at: row.updated_at,
      updated_by: row.updated_by,
      error: b.error ?? b.secretError?.en ?? (hidden ? `a model of the model file has the name '${row.name}' and is served instead` : null),
    };
  }

  /**
   * One small real request to one deployment of a model (any source; a disabled stored model too): bypassing the
   * router (no breaker, retry or fallback) and charged to nobody. An upstream's failure is an answer with ok false.
   */
  async test(name: string, deploymentId: string | undefined): Promise<TestResult> {
    // the model served under that name; else a stored one that is not served (disabled, or hidden by the file's)
    const b = this.built.get(name);
    const spec = this.o.models.get(name) ?? b?.spec;
    if (!spec) {
      if (b) return { ok: false, model: name, deployment: deploymentId ?? name, latency_ms: 0, error: { code: 'invalid_model_entry', message: b.error ?? 'the entry is refused' } };
      throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
    }
    const deps: DeploymentSpec[] = spec.deployments ?? [{ ...spec, id: deploymentName(spec), weight: 1, upstream_model: upstreamName(spec) } as DeploymentSpec];
    const dep = deploymentId === undefined ? deps[0]! : deps.find((d) => d.id === deploymentId);
    if (!dep) {
      throw new AppError('invalid_model_entry', msg('model_deployment_unknown', { name, deployment: deploymentId ?? '', list: deps.map((d) => d.id).join(', ') }), 'deployment');
    }
    const timeoutMs = Math.min(dep.timeouts?.first_byte_ms ?? TEST_TIMEOUT_MS, dep.timeouts?.total_ms ?? TEST_TIMEOUT_MS, TEST_TIMEOUT_MS);
    const t0 = performance.now();
    const done = (r: Omit<TestResult, 'model' | 'deployment' | 'latency_ms'>): TestResult => ({
      model: name,
      deployment: dep.id,
      latency_ms: Math.round(performance.now() - t0),
      ...r,
    });
    if (dep.type !== 'text' && dep.type !== 'embeddings') {
      return done({ ok: false, error: { code: 'unsupported_parameter', message: `a test request is made to text and embeddings deployments; this one is ${dep.type}` } });
    }
    const provider = this.o.providers.get(dep.provider);
    const ac = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const e = new EngineError(`no answer within ${timeoutMs} ms`, 'upstream_timeout', 504);
        ac.abort(e);
        reject(e);
      }, timeoutMs);
    });
    // an upstream's engine is made for this request alone (the served one keeps its connections and health);
    // an embedded one is the served engine (loading a model twice would double its memory)
    const own = provider?.remote === true;
    let engine: TextEngine | EmbeddingsEngine | undefined;
    try {
      const make = async (): Promise<TextEngine | EmbeddingsEngine> => {
        if (!own) return dep.type === 'text' ? this.o.engines.text(dep) : this.o.engines.embeddings(dep);
        const create = provider.create[dep.type];
        if (!create) throw new EngineError(`provider ${dep.provider} does not serve ${dep.type}`, 'engine_unavailable', 503);
        return (create as (s: unknown, c: ProviderContext) => Promise<TextEngine | EmbeddingsEngine>)(dep, this.o.ctx);
      };
      const run = async (): Promise<string> => {
        engine = await make();
        if (dep.type === 'embeddings') {
          const r = await (engine as EmbeddingsEngine).embed({ model: dep.upstream_model, input: ['Portico test'], signal: ac.signal });
          const v = r.vectors;
          const dims = Array.isArray(v) ? (v[0]?.length ?? 0) : v.dims;
          if ((Array.isArray(v) ? v.length : v.count) !== 1 || dims === 0) throw new EngineError('the upstream answered no vector', 'engine_error', 502);
          return `1 vector of ${dims} dimensions`;
        }
        let text = '';
        for await (const ev of (engine as TextEngine).generate({
          model: dep.upstream_model,
          messages: [{ role: 'user', content: 'Reply with the word OK.' }],
          maxOutputTokens: 16,
          stream: false,
          signal: ac.signal,
        })) {
          if (ev.type === 'text_delta') text += ev.delta;
        }
        return text.length > 500 ? `${text.slice(0, 500)}…` : text;
      };
      const output = await Promise.race([run(), timedOut]);
      return done({ ok: true, output });
    } catch (e) {
      const error =
        e instanceof EngineError || e instanceof AppError
          ? { code: e.code, message: e.message }
          : { code: 'engine_error', message: e instanceof Error ? e.message : 'the test request failed' };
      return done({ ok: false, error });
    } finally {
      clearTimeout(timer);
      ac.abort();
      // an engine made for the test is closed (a hung call is let go, not waited for)
      if (own) void Promise.resolve(engine?.close()).catch(() => {});
    }
  }
}

/** The objects a secret's place is put on: the deployment of its id; the entry itself for a model without a list. */
function targetsOf(spec: ModelSpec, place: string): object[] {
  if (place === 'api_key') return [spec];
  const id = /^deployments\.(.+)\.api_key$/.exec(place)?.[1];
  const i = spec.deployments?.findIndex((x) => x.id === id) ?? -1;
  const d = i >= 0 ? spec.deployments?.[i] : undefined;
  // the entry carries its first deployment's keys too (spec.ts, ModelSpec.deployments)
  return d ? (i === 0 ? [d, spec] : [d]) : [];
}

/** The entry of a model not stored here: as the model file wrote it, or as Portico made it (pulled, built-in). */
function entryOf(spec: ModelSpec): Record<string, unknown> {
  const raw = rawEntryOf(spec);
  if (isObject(raw)) return raw;
  const { deployments: _d, builtin: _b, ...rest } = spec as ModelSpec & { builtin?: unknown };
  return rest as Record<string, unknown>;
}
