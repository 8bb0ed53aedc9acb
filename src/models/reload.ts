/**
 * What a reload of the model file changes, worked out before anything is applied (issue 21): which models are
 * added, removed or changed, which engines must be made afresh and which deployments' health (breaker, counts)
 * starts over. A deployment is unchanged when its id and every one of its keys are the same: it keeps its engine
 * and its health. An unchanged model keeps its spec object, so what is built per spec (its route) stays too.
 */
import type { ModelSpec } from './spec.js';
import { storedSecretOf } from '../engines/provider.js';

/** What a reload did, as the log, `portico models reload` and a SIGHUP's log line say it. */
export type ReloadResult = { ok: true; file: string; added: string[]; removed: string[]; changed: string[]; unchanged: number } | { ok: false; file?: string; error: string };

export interface ReloadPlan {
  /** the new configured models, in file order; an unchanged model is the previous object */
  specs: ModelSpec[];
  added: string[];
  removed: string[];
  changed: string[];
  unchanged: number;
  /** the previous specs of the models that changed or went away */
  replaced: ModelSpec[];
  /** engine names whose engines are retired: a deployment changed or went away, or a name the file now owns */
  engines: string[];
  /** deployment ids whose health starts afresh */
  deployments: string[];
}

/** One deployment as reloading sees it: the engine it names, the id its health has, and all its keys. */
export interface DeploymentUnit {
  engine: string;
  health: string;
  content: string;
}

/** keys of a model without a `deployments` list that are the model's, not its one deployment's */
const MODEL_LEVEL = new Set(['owned_by', 'pricing', 'routing', 'retries', 'retry_backoff_ms', 'max_retry_wait_ms', 'breaker', 'fallbacks', 'context_window_fallbacks']);

/** JSON with the keys of every object sorted: two specs with the same keys and values give the same text */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === 'object' && !Array.isArray(x)
      ? Object.fromEntries(
          Object.entries(x as Record<string, unknown>)
            .filter(([, y]) => y !== undefined)
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : x,
  );
}

/**
 * The keys of an entry or deployment as text, its stored secret's version included (a symbol JSON does not see:
 * engines/provider.ts, STORED_SECRET): a changed api_key is a changed deployment, though no key shows it.
 */
function contentOf(x: object): string {
  const secret = storedSecretOf(x);
  return secret ? `${canonical(x)}\u0000${secret.version}` : canonical(x);
}

/**
 * The deployments of a model: each item of its `deployments` (engine and health by its id), or the model itself
 * (engine by its name, health by its id or name, as the router and the engine registry key them).
 */
export function deploymentUnits(spec: ModelSpec): DeploymentUnit[] {
  if (spec.deployments) return spec.deployments.map((d) => ({ engine: d.name, health: d.id, content: contentOf(d) }));
  const own = Object.fromEntries(Object.entries(spec).filter(([k]) => !MODEL_LEVEL.has(k)));
  const secret = storedSecretOf(spec);
  return [{ engine: spec.name, health: spec.id ?? spec.name, content: secret ? `${canonical(own)}\u0000${secret.version}` : canonical(own) }];
}

/** the deployments' contents, stored secrets included */
const canonicalDeployments = (s: ModelSpec) => (s.deployments ?? []).map(contentOf).join('\u0001');

/** Compares the configured models before and after a reload (both already checked). */
export function planReload(before: readonly ModelSpec[], after: readonly ModelSpec[]): ReloadPlan {
  const old = new Map(before.map((s) => [s.name, s]));
  const now = new Set(after.map((s) => s.name));
  const added: string[] = [];
  const changed: string[] = [];
  const replaced: ModelSpec[] = [];
  const specs = after.map((s) => {
    const o = old.get(s.name);
    if (!o) {
      added.push(s.name);
      return s;
    }
    if (contentOf(o) === contentOf(s) && canonicalDeployments(o) === canonicalDeployments(s)) return o;
    changed.push(s.name);
    replaced.push(o);
    return s;
  });
  const removed = before.filter((s) => !now.has(s.name));
  replaced.push(...removed);
  // deployments by engine and health: kept when the same pair has the same keys on both sides
  const key = (u: DeploymentUnit) => `${u.engine}\u0000${u.health}`;
  const oldUnits = new Map(before.flatMap(deploymentUnits).map((u) => [key(u), u.content]));
  const newUnits = new Map(after.flatMap(deploymentUnits).map((u) => [key(u), u.content]));
  const engines = new Set<string>();
  const deployments = new Set<string>();
  for (const [units, other] of [
    [before.flatMap(deploymentUnits), newUnits],
    [after.flatMap(deploymentUnits), oldUnits],
  ] as const) {
    for (const u of units) {
      if (other.get(key(u)) === u.content) continue;
      engines.add(u.engine);
      deployments.add(u.health);
    }
  }
  return {
    specs,
    added,
    removed: removed.map((s) => s.name),
    changed,
    unchanged: specs.length - added.length - changed.length,
    replaced,
    engines: [...engines],
    deployments: [...deployments],
  };
}
