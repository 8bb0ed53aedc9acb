import { AppError, msg } from '../platform/errors.js';
import { SOURCE_TEXT, StoredModels, type ModelItem, type StoredRow, type TestResult } from '../models/stored.js';
import type { AuditLog } from './audit.js';
import type { Actor } from './service.js';

/** What the audit log writes in place of a secret: never the key, only what happened to it. */
type Mark = '(set)' | '(changed)' | '(removed)';

/** An entry with each secret's place marked (the audit log's before and after). */
function marked(entry: Record<string, unknown>, marks: Record<string, Mark>, enabled: boolean): Record<string, unknown> {
  const copy = JSON.parse(JSON.stringify(entry)) as Record<string, unknown>;
  for (const [place, mark] of Object.entries(marks)) {
    if (place === 'api_key') copy.api_key = mark;
    const i = Number(/^deployments\.(\d+)\.api_key$/.exec(place)?.[1]);
    const d = Number.isInteger(i) && Array.isArray(copy.deployments) ? (copy.deployments[i] as Record<string, unknown> | undefined) : undefined;
    if (d && typeof d === 'object') d.api_key = mark;
  }
  return { entry: copy, enabled };
}

const setMarks = (row: StoredRow) => Object.fromEntries(Object.keys(row.secrets).map((k) => [k, '(set)' as Mark]));
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
    for (const [place, key] of secrets) if (key !== null) sealed[place] = stored.seal(spec.name, place, key);
    const at = now();
    const row = await stored.store.insert({ name: spec.name, entry, secrets: sealed, enabled: true, created_at: at, updated_at: at, updated_by: actor.userId });
    if (!row) throw new AppError('conflict', msg('model_name_taken', { name: spec.name, source: SOURCE_TEXT.stored }), 'entry.name');
    await this.changed();
    await this.record(actor, 'model.create', row.name, null, marked(row.entry, setMarks(row), true));
    return this.item(row.name);
  }

  /** An api_key left out keeps the stored one (per place), null removes it; a place that can no longer hold one loses it. */
  async update(actor: Actor, name: string, raw: unknown): Promise<ModelItem> {
    const { stored } = this.d;
    const before = await stored.writable(name);
    const { entry: given, secrets } = stored.takeSecrets(raw);
    if (given.name !== undefined && given.name !== name) {
      throw new AppError('invalid_request', msg('model_rename', { given: String(given.name), name }), 'entry.name');
    }
    const entry = { name, ...given };
    const spec = stored.check(entry);
    await stored.assertFree(spec, false);
    const next: Record<string, string> = {};
    const marks: Record<string, '(set)' | '(changed)' | '(removed)'> = {};
    for (const place of StoredModels.placesOf(entry)) {
      const key = secrets.get(place);
      if (typeof key === 'string') {
        next[place] = stored.seal(name, place, key);
        marks[place] = place in before.secrets ? '(changed)' : '(set)';
      } else if (key === undefined && before.secrets[place] !== undefined) {
        next[place] = before.secrets[place];
        marks[place] = '(set)';
      }
    }
    for (const place of Object.keys(before.secrets)) if (!(place in next)) marks[place] = '(removed)';
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
