import type { FastifyRequest } from 'fastify';
import type { FeatureModule } from '../platform/module.js';
import type { Db } from '../platform/db/index.js';
import type { UserPrincipal } from '../platform/auth/jwt.js';
import type { OperatorPrincipal } from '../platform/auth/principal.js';
import type { KeyService } from '../portal/keys/service.js';
import type { KeyVerifier } from '../portal/keys/verifier.js';
import type { Operators } from '../portal/operators/service.js';
import type { UsageService } from '../portal/usage/service.js';
import type { AuditLog } from './audit.js';
import { AdminStore } from './store.js';
import { AdminService } from './service.js';
import { operatorGate } from './gate.js';
import type { AdminContext } from './context.js';
import whoami from './routes/whoami.js';
import audit from './routes/audit.js';
import operatorsList from './routes/operators-list.js';
import operatorsAdd from './routes/operators-add.js';
import operatorsRemove from './routes/operators-remove.js';
import usersList from './routes/users-list.js';
import userGet from './routes/user-get.js';
import userKeysDisable from './routes/user-keys-disable.js';
import userKeysEnable from './routes/user-keys-enable.js';
import orgsList from './routes/orgs-list.js';
import orgGet from './routes/org-get.js';
import credits from './routes/credits.js';
import usage from './routes/usage.js';
import requests from './routes/requests.js';
import requestsCsv from './routes/requests-csv.js';
import requestOne from './routes/request-one.js';
import orgMemberRole from './routes/org-member-role.js';
import type { OrgMembers } from '../portal/keys/members.js';
import budgetsList from './routes/budgets-list.js';
import budgetsSet from './routes/budgets-set.js';
import budgetsRemove from './routes/budgets-remove.js';
import modelsList from './routes/models-list.js';
import modelsCreate from './routes/models-create.js';
import modelsUpdate from './routes/models-update.js';
import modelsDisable from './routes/models-disable.js';
import modelsEnable from './routes/models-enable.js';
import modelsRemove from './routes/models-remove.js';
import modelsTest from './routes/models-test.js';
import { ModelsAdmin } from './models.js';
import type { StoredModels } from '../models/stored.js';
import health from './routes/health.js';
import { ClusterHealth, type HealthSource } from './health.js';
import { Budgets, BudgetStore } from './budgets.js';
import type { ChangeFeed } from '../platform/cluster/feed.js';
import type { FastifyBaseLogger } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';

export interface AdminDeps {
  db: Db;
  operators: Operators;
  audit: AuditLog;
  usage: UsageService;
  keys: { management: KeyService; inference: KeyService };
  verifier: KeyVerifier;
  /** tells every instance a budget changed */
  feed?: ChangeFeed;
  log: FastifyBaseLogger;
  /** how the soft limit's webhook is posted (tests) */
  postWebhook?: (url: string, body: unknown) => Promise<void>;
  /** the portal's way of recognizing a user (bearer JWT, or the web page's session) */
  authenticate: (req: FastifyRequest) => Promise<UserPrincipal>;
  /** the models operators add at run time, and the served ones they see (the runtime reads and serves them) */
  storedModels: StoredModels;
  /** this instance and its deployments' figures (the router's), for GET /health; the others' come over `feed` */
  health: HealthSource;
  /** the request log (src/platform/ops/request-log.ts), flushed before the requests are read; unset: the log is off */
  requestLog?: { flush(): Promise<void> };
  /** the organization roles an operator sets; unset where the identity provider issues roles */
  members?: OrgMembers;
}

export interface AdminModule extends FeatureModule {
  /** the gate of /v1/admin: an operator, or 401/403 (compose/http.ts runs it before the body is read) */
  authenticate(req: FastifyRequest): Promise<OperatorPrincipal>;
  /** the {base_url} gate: refuses a request whose key, owner or organization spent a budget's limit (429 budget_exceeded) */
  checkBudgets(key: KeyPrincipal): Promise<void>;
}

/** The operators' API under /v1/admin (docs/api.md, "Admin API"): users, organizations, keys, credits, usage, requests, audit, health. */
export function createAdminModule(deps: AdminDeps): AdminModule {
  const budgetStore = new BudgetStore(deps.db);
  const budgets = new Budgets(budgetStore, { log: deps.log, feed: deps.feed, post: deps.postWebhook });
  // what this instance charges counts in the budgets' spend at once
  deps.usage.onRecord((e) => budgets.record(e));
  // every instance answers the others' health asks, whether or not anybody looks at its own page
  const clusterHealth = new ClusterHealth(deps.health, deps.feed, { log: deps.log });
  const ctx: AdminContext = {
    health: clusterHealth,
    service: new AdminService({
      store: new AdminStore(deps.db),
      audit: deps.audit,
      operators: deps.operators,
      usage: deps.usage,
      keys: deps.keys,
      budgets: { store: budgetStore, guard: budgets },
      requestLog: deps.requestLog,
      members: deps.members,
    }),
    models: new ModelsAdmin({ stored: deps.storedModels, audit: deps.audit }),
  };
  return {
    name: 'admin',
    authenticate: operatorGate({ verifier: deps.verifier, operators: deps.operators, authenticate: deps.authenticate }),
    checkBudgets: (key) => budgets.check(key),
    close: () => clusterHealth.close(),
    routes: {
      admin: (app) => {
        for (const r of [
          whoami,
          audit,
          operatorsList,
          operatorsAdd,
          operatorsRemove,
          usersList,
          userGet,
          userKeysDisable,
          userKeysEnable,
          orgsList,
          orgGet,
          orgMemberRole,
          credits,
          usage,
          requests,
          requestsCsv,
          requestOne,
          budgetsList,
          budgetsSet,
          budgetsRemove,
          modelsList,
          modelsCreate,
          modelsUpdate,
          modelsDisable,
          modelsEnable,
          modelsRemove,
          modelsTest,
          health,
        ]) {
          r(app, ctx);
        }
      },
    },
  };
}
