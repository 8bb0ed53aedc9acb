import { AppError, msg } from '../platform/errors.js';
import { secretsOf, SOURCE_TEXT, StoredModels, type ModelItem, type StoredRow, type TestResult } from '../models/stored.js';
import { SecretError } from '../platform/secrets.js';
import type { AuditLog } from './audit.js';
import type { Actor } from './service.js';

/** What the audit log writes in place of a secret: never the key, only what happened to it. */
type Mark = '(set)' | '(changed)' | '(removed)';

/** An entry with each secret's place (`api_key`, `deployments.<id>.api_key`) marked (the audit log's before and after). */
function marked(entry: Record<string, unknown>, marks: Record<string, Mark>, enabled: boolean): Record<string, unknown> {
  const copy = JSON.parse(JSON.stringify(entry)) as Record<string, unknown>;
  const name = String(copy.name);
  for (const [place, mark] of Object.entries(marks)) {
    if (place === 'api_key' && !Array.isArray(copy.deployments)) copy.api_key = mark;
    const id = /^deployments\.(.+)\.api_key$/.exec(place)?.[1];
    const list = Array.isArray(copy.deployments) ? (copy.deployments as unknown[]) : [];
    const d = list.find((x, i) => x && typeof x === 'object' && ((x as { id?: unknown }).id ?? `${name}#${i + 1}`) === id) as Record<string, unknown> | undefined;
    if (d) d.api_key = mark;
  }
  return { entry: copy, enabled };
}

const setMarks = (row: StoredRow) => Object.fromEntries([...secretsOf(row).keys()].map((k) => [k, '(set)' as Mark]));
const now = () => Math.floor(Date.now() / 1000);

/**
 * Models and deployments at run time (/v1/admin/models): the stored models are changed in the database, applied on
 * this instance and announced to the others (models/stored.ts); every change is audited with its secrets replaced
 * by what happened to them.
 */
export class ModelsAdmin {
  constructor(
    private readonly d: {
      stored: StoredModels;
      audit: AuditLog;
    },
  ) {}

  private async record(actor: Actor, action: string, target: string, before: unknown, after: unknown) {
    await this.d.audit.write({ actor: actor.userId, actorKeyId: actor.keyId, requestId: actor.requestId, action, target, before, after });
  }

  /** applied here, told to the other instances */
  private async changed() {
    await this.d.stored.refresh();
    await this.d.stored.announce();
  }

  private item(name: string): ModelItem {
    const item = this.d.stored.item(name);
    if (!item) throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
    return item;
  }

  list() {
    return { list: this.d.stored.list() };
  }

  async create(actor: Actor, raw: unknown): Promise<ModelItem> {
    const { stored } = this.d;
    const { entry, secrets } = stored.takeSecrets(raw);
    const spec = stored.check(entry);
    await stored.assertFree(spec, true);
    const sealed: Record<string, string> = {};
    for (const slot of StoredModels.slotsOf(entry)) {
      const key = secrets.get(slot.place);
      if (typeof key === 'string') sealed[slot.rowKey] = stored.seal(spec.name, slot, key);
    }
    const at = now();
    const row = await stored.store.insert({ name: spec.name, entry, secrets: sealed, enabled: true, created_at: at, updated_at: at, updated_by: actor.userId });
    if (!row) throw new AppError('conflict', msg('model_name_taken', { name: spec.name, source: SOURCE_TEXT.stored }), 'entry.name');
    await this.changed();
    await this.record(actor, 'model.create', row.name, null, marked(row.entry, setMarks(row), true));
    return this.item(row.name);
  }

  /**
   * An api_key left out keeps the stored one of its deployment, found by the deployment's id (never by its index: a
   * deployment removed or moved takes its key with it, a new id has none), or of a model without a list while it
   * stays one; null removes it; a place that can no longer hold one loses it. A kept key is bound to the origin of
   * the base_url it was given for: an entry that moves it to another origin without typing the key again is refused
   * (400), so a key never follows to another upstream.
   */
  async update(actor: Actor, name: string, raw: unknown): Promise<ModelItem> {
    const { stored } = this.d;
    const before = await stored.writable(name);
    const { entry: given, secrets } = stored.takeSecrets(raw);
    if (given.name !== undefined && given.name !== name) {
      throw new AppError('invalid_model_entry', msg('model_rename', { given: String(given.name), name }), 'entry.name');
    }
    const entry = { name, ...given };
    const spec = stored.check(entry);
    await stored.assertFree(spec, false);
    const had = secretsOf(before);
    const next: Record<string, string> = {};
    const marks: Record<string, Mark> = {};
    for (const slot of StoredModels.slotsOf(entry)) {
      const key = secrets.get(slot.place);
      const held = had.get(slot.place);
      if (typeof key === 'string') {
        next[slot.rowKey] = stored.seal(name, slot, key);
        marks[slot.place] = held ? '(changed)' : '(set)';
      } else if (key === undefined && held?.written) {
        if (held.origin !== slot.origin) {
          throw new AppError(
            'invalid_model_entry',
            msg('model_key_origin', { path: `entry.${slot.path}`, key: slot.urlKey, from: held.origin ?? `(no ${slot.urlKey})`, to: slot.origin ?? `(no ${slot.urlKey})` }),
            `entry.${slot.path}`,
          );
        }
        try {
          next[slot.rowKey] = stored.reseal(name, held, slot);
        } catch (e) {
          if (!(e instanceof SecretError)) throw e;
          throw new AppError('invalid_model_entry', msg('model_secret_unreadable', { name, why: e.message }), `entry.${slot.path}`);
        }
        marks[slot.place] = '(set)';
      }
    }
    const kept = new Set(
      StoredModels.slotsOf(entry)
        .filter((s) => s.rowKey in next)
        .map((s) => s.place),
    );
    for (const place of had.keys()) if (!kept.has(place)) marks[place] = '(removed)';
    const row = await stored.store.update(name, { entry, secrets: next, updated_at: now(), updated_by: actor.userId });
    if (!row) throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
    await this.changed();
    await this.record(actor, 'model.update', name, marked(before.entry, setMarks(before), before.enabled), marked(row.entry, marks, row.enabled));
    return this.item(name);
  }

  async setEnabled(actor: Actor, name: string, enabled: boolean): Promise<ModelItem> {
    const { stored } = this.d;
    const before = await stored.writable(name);
    if (before.enabled === enabled) return this.item(name);
    const row = await stored.store.update(name, { enabled, updated_at: now(), updated_by: actor.userId });
    if (!row) throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
    await this.changed();
    await this.record(
      actor,
      enabled ? 'model.enable' : 'model.disable',
      name,
      marked(before.entry, setMarks(before), before.enabled),
      marked(row.entry, setMarks(row), row.enabled),
    );
    return this.item(name);
  }

  async remove(actor: Actor, name: string): Promise<{ name: string; deleted: true }> {
    const { stored } = this.d;
    const before = await stored.writable(name);
    const row = await stored.store.remove(name);
    if (!row) throw new AppError('model_not_found', msg('model_unknown', { name }), 'name');
    await this.changed();
    await this.record(actor, 'model.remove', name, marked(before.entry, setMarks(before), before.enabled), null);
    return { name, deleted: true };
  }

  test(name: string, deployment: string | undefined): Promise<TestResult> {
    return this.d.stored.test(name, deployment);
  }
}
