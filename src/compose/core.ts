/**
 * The core: what every command needs (config, logger, database and migrations, keys, usage, models, the change
 * feed to tell running instances what changed). `portico serve` builds the runtime on it (./runtime.ts); the
 * operator commands build the core alone, so they never start engines, queues, workers or sweeps, and exit
 * when they are done.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { DestinationStream } from 'pino';
import type { Config } from '../platform/config.js';
import { createLogger, type Logger } from '../platform/log.js';
import { dbOptionsOf, openDb, type DbOptions, type OpenedDb } from '../platform/db/index.js';
import { secureDataDir } from '../platform/data-dir.js';
import { withProgress } from '../platform/ops/progress.js';
import { createFeed, type ChangeFeed } from '../platform/cluster/feed.js';
import { OrgRoles } from '../portal/keys/roles.js';
import { OrgMembers } from '../portal/keys/members.js';
import { assertSamePepper } from '../platform/db/fingerprints.js';
import { installationId } from '../platform/db/installation.js';
import { KeyStore, type KeyRow } from '../portal/keys/store.js';
import { KeyService } from '../portal/keys/service.js';
import { UsageStore } from '../portal/usage/store.js';
import { UsageService } from '../portal/usage/service.js';
import { RefusedRecords, UsageJournal } from '../portal/usage/journal.js';
import { BudgetGuard } from '../portal/usage/budget.js';
import { loadModelConfig, type ModelSpec } from '../models/config.js';
import { ModelRegistry } from '../models/registry.js';
import { OperatorStore } from '../portal/operators/store.js';
import { Operators } from '../portal/operators/service.js';
import { AuditLog } from '../admin/audit.js';

export interface Core {
  readonly config: Config;
  readonly log: Logger;
  readonly db: OpenedDb;
  readonly keys: {
    readonly store: KeyStore;
    readonly management: KeyService;
    readonly inference: KeyService;
    readonly roles: OrgRoles;
    /** the organization roles an operator sets; undefined where the identity provider owns roles (docs/api.md, "Organization roles") */
    readonly members?: OrgMembers;
  };
  readonly usage: UsageService;
  /** who operates the installation (a token's claim, `portico operators add`, the first user of a fresh embedded install) */
  readonly operators: Operators;
  /** every change an operator makes (the admin API, `portico operators`) */
  readonly audit: AuditLog;
  /**
   * the running spend of budgets: checks requests when serving with BILLING_ENABLED; in every process it tells
   * the running instances about grants (Redis, or the change feed), its Redis connection opened on first use
   */
  readonly budget: BudgetGuard;
  /** the configured models (the model file); the runtime adds the built-in ones */
  readonly models: ModelRegistry;
  /** messages every instance hears (key changes, cancels); a process that only publishes opens no listener */
  readonly feed: ChangeFeed;
  /**
   * with REDIS_URL: what every Redis key and channel of this installation starts with (`<prefix>:...`): REDIS_PREFIX,
   * or `portico:<installation id>` (docs/deployment.md, "What is shared, and how")
   */
  readonly redisPrefix: string | undefined;
  close(): Promise<void>;
}

export interface CoreOptions {
  /** 'serve' keeps usage in the local journal first (DATA_DIR) and ships what the last run left; 'command' writes nothing there */
  role: 'serve' | 'command';
  /** PostgreSQL schema of its own (tests) */
  dbSchema?: string;
  /** PGlite: a new database starts as a copy of this dump of a migrated one instead of initdb (tests: test/helpers/db-template.ts) */
  dbTemplate?: string;
  /**
   * how the database is opened (default `openDb`): the test suite lends its apps an in-memory PGlite emptied back to
   * the template (test/helpers/pglite-pool.ts) instead of starting a new one each time; the core closes what it gets
   */
  openDb?: (options: DbOptions) => Promise<OpenedDb>;
  /** models instead of the PORTICO_CONFIG file (tests) */
  models?: ModelSpec[];
  /** where log lines go (default stdout) */
  logDestination?: DestinationStream;
  /** told what the start is doing while it takes long (the early server answers /readyz with it) */
  onPhase?: (what: string | undefined) => void;
}

const where = (config: Config) => join(config.dataDir, 'pglite');

export async function createCore(config: Config, opts: CoreOptions): Promise<Core> {
  const base = createLogger(config.logLevel, opts.logDestination, config.logFormat);
  const log = config.workerId ? base.child({ worker: config.workerId }) : base;
  // serving checks what the model file names in the environment too (an api_key_env that is unset): operator
  // commands call no upstream and need none of it
  const models = new ModelRegistry(opts.models ?? loadModelConfig(config.modelConfigPath, opts.role === 'serve' ? { env: process.env } : {}).models);
  if (!config.inMemoryDb) {
    const { fixed, dirWasOpen } = secureDataDir(config.dataDir);
    if (fixed) log.warn({ dataDir: config.dataDir, fixed, dirWasOpen }, `DATA_DIR held ${fixed} files or folders that other users could read or write: made private (0700/0600)`);
  }
  // a first start creates the embedded database (initdb: ~10 s on two cores); it says so while it goes on
  const creating = !config.databaseUrl && !config.inMemoryDb && !existsSync(join(config.dataDir, 'pglite', 'PG_VERSION'));
  const opening = creating
    ? config.pgliteTemplate
      ? `creating the embedded database in ${where(config)} from ${config.pgliteTemplate} (first start)`
      : `creating the embedded database in ${where(config)} (first start)`
    : config.databaseUrl
      ? 'connecting to the database'
      : 'opening the database';
  const progress = { onPhase: opts.onPhase };
  const t0 = Date.now();
  const db = await withProgress(
    log,
    opening,
    () => (opts.openDb ?? openDb)(dbOptionsOf(config, { schema: opts.dbSchema, ...(opts.dbTemplate ? { template: opts.dbTemplate } : {}) })),
    progress,
  );
  if (creating && !opts.dbTemplate)
    log.info(
      { dataDir: where(config), template: config.pgliteTemplate ?? null, ms: Date.now() - t0 },
      `created the embedded database in ${where(config)} ${config.pgliteTemplate ? `as a copy of ${config.pgliteTemplate}` : 'with initdb'}`,
    );
  const closers: Array<() => Promise<void>> = [() => db.close()];
  const close = async () => {
    for (const c of closers.splice(0).reverse()) {
      try {
        await c();
      } catch (e) {
        log.warn({ err: (e as Error).message }, 'closing failed; closing the rest');
      }
    }
  };
  try {
    await withProgress(log, 'migrating the database', () => db.migrate(), progress);
    // instances sharing this database must share KEY_PEPPER: refuse to start with a message that says so. Only a
    // serving instance records and checks it: an operator command (keys disable, credits grant) reads no digest,
    // and must not pin its own pepper on a database before the first instance starts
    if (opts.role === 'serve') await assertSamePepper(db.db, config.keyPepper, config.keyPepperFromEnv);
    const keyStore = new KeyStore(db.db);
    const management = new KeyService('management', keyStore, config.keyPepper, config.limits.activeManagementKeys, config.jwt.adminRole);
    const inference = new KeyService('inference', keyStore, config.keyPepper, config.limits.activeInferenceKeys, config.jwt.adminRole, config.keyMaxConcurrency);
    // what this installation shares through Redis or LISTEN/NOTIFY is named after it, so installations on one Redis
    // (whatever their database numbers: pub/sub ignores them) or one PostgreSQL database never hear each other
    const installation = (config.redisUrl && !config.redisPrefix) || (!config.redisUrl && config.databaseUrl) ? await installationId(db.db) : undefined;
    const redisPrefix = config.redisUrl ? (config.redisPrefix ?? `portico:${installation}`) : undefined;
    const feed = createFeed({ redisUrl: config.redisUrl, redisPrefix, databaseUrl: config.databaseUrl, installation, log });
    // a key change reaches every other instance at once (this one's verifier is told directly by the runtime);
    // closing waits for the messages still on their way (an operator command exits right after its change)
    const sending = new Set<Promise<void>>();
    closers.push(async () => {
      await Promise.all(sending);
      await feed.close();
    });
    for (const s of [management, inference]) {
      s.onChange((c) => {
        // a key made here is announced too: the other instances' verifiers then know it exists, so a flood of forged
        // keys from its client's address never throttles it (src/portal/keys/verifier.ts)
        const p = feed
          .publish('keys', c.what === 'created' ? { digest: c.digest, created: true } : { digest: c.digest })
          .catch((e) => log.warn({ err: (e as Error).message }, 'key change not broadcast; other instances see it within the cache freshness window'))
          .finally(() => sending.delete(p));
        sending.add(p);
      });
    }
    // one journal per process: a worker forked by `serve --workers N` keeps its own under DATA_DIR/workers/<id>
    const journalDir = config.workerId ? workerDir(config.dataDir, config.workerId) : config.dataDir;
    const journal = opts.role === 'serve' && !config.inMemoryDb ? new UsageJournal(journalDir) : undefined;
    if (journal && (config.workerId ?? 1) === 1) adoptOrphanJournals(journal, config, log);
    const usage = new UsageService(new UsageStore(db.db), journal, { log, refused: new RefusedRecords(journalDir) });
    const budget = new BudgetGuard(usage, opts.role === 'serve' && config.billingEnabled, { redisUrl: config.redisUrl, redisPrefix: config.redisPrefix, feed, log });
    closers.push(() => budget.close());
    closers.push(() => usage.close());
    if (journal) await usage.recover().catch((e) => log.warn({ err: (e as Error).message }, 'usage journal not shipped yet; it will be retried'));
    // who administers which organization now, as the tokens say: org keys follow it (docs/api.md, "Organization keys")
    const keyChanged = (row: KeyRow) => (row.kind === 'management' ? management : inference).changed(row);
    const roles = new OrgRoles(keyStore, config.jwt.adminRole, keyChanged);
    // roles are Portico's own where it signs its own tokens and links (no JWT_SECRET, no JWT_JWKS_URL, no OpenID
    // Connect): there an operator sets a member's role (PUT /v1/admin/orgs/{org_id}/members/{user_id})
    const members = config.jwt.secretGenerated && !config.web.oidc ? new OrgMembers(db.db, keyStore, config.jwt.adminRole, keyChanged) : undefined;
    // the first user of a fresh install is an operator when Portico signs its own tokens (the embedded default: no
    // JWT_SECRET, no JWT_JWKS_URL, no OpenID Connect provider) — elsewhere the identity provider or the CLI names them
    const operators = new Operators(new OperatorStore(db.db), config.jwt.secretGenerated && !config.web.oidc);
    // only an operator makes a Management API Key with the operator scope; one named by a token's claim alone is
    // recorded then, so that the key works without a token (src/portal/operators/service.ts, followClaim)
    management.guardOperatorScope(async (user) => {
      if (!(await operators.isOperator(user))) return false;
      if (user.operator) await operators.followClaim(user);
      return true;
    });
    const audit = new AuditLog(db.db);
    return { config, log, db, keys: { store: keyStore, management, inference, roles, members }, usage, operators, audit, budget, models, feed, redisPrefix, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/** where worker `id` of `serve --workers N` keeps its usage journal */
export function workerDir(dataDir: string, id: number): string {
  return join(dataDir, 'workers', String(id));
}

/**
 * Journals left by workers that no longer exist (WORKERS was lowered, or one process replaced the workers):
 * worker 1 takes their records into its own journal, which it ships at once, and removes them. Record ids
 * make a second delivery harmless, so a crash between the copy and the removal loses and doubles nothing.
 */
function adoptOrphanJournals(journal: UsageJournal, config: Config, log: Logger): void {
  const root = join(config.dataDir, 'workers');
  // worker 1 takes the single process's journal and those of workers above the count; a single process takes every worker's
  const dirs = config.workerId ? [config.dataDir] : [];
  const keep = config.workerId ? config.workers : 0;
  if (existsSync(root)) for (const d of readdirSync(root)) if (/^\d+$/.test(d) && Number(d) > keep) dirs.push(join(root, d));
  for (const dir of dirs) {
    const orphan = new UsageJournal(dir);
    const rows = orphan.recover();
    if (rows.length) {
      for (const r of rows) journal.append(r);
      log.info({ from: dir, records: rows.length }, 'usage journal of a process that no longer runs taken over');
    }
    if (rows.length) orphan.clear();
    orphan.close();
  }
}
