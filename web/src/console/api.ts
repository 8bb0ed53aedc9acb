/** The operator's console's calls: /v1/admin, typed from the TypeBox schemas its routes declare (as ../api.ts types the portal). */
// Type-only imports: esbuild erases them, and a field the server renames or drops is a type error in the web check.
import type { Static } from 'typebox';
import type {
  AdminUsageReportSchema,
  AuditQuery,
  AuditSchema,
  BudgetBody,
  BudgetListSchema,
  BudgetSchema,
  GrantAnswer,
  GrantBody,
  HealthAnswer,
  KeyChangeAnswer,
  ModelItemSchema,
  ModelListSchema,
  ModelTestSchema,
  OperatorSchema,
  OrgDetail,
  OrgSummary,
  RequestDetail,
  RequestSchema,
  RequestsQuery,
  UsageQuery,
  UserDetail,
  UserSummary,
  WhoamiSchema,
} from '../../../src/admin/schemas.js';

export { admin } from '../api.js';

/** one page of a list (`GET /users`, `/orgs`, `/audit`, `/requests`) */
export interface Paged<T> {
  list: T[];
  total: number;
  page: number;
  per_page: number;
}

/** GET /whoami */
export type Whoami = Static<typeof WhoamiSchema>;
/** GET /users: one user */
export type AdminUser = Static<typeof UserSummary>;
/** GET /users/{user_id} */
export type AdminUserDetail = Static<typeof UserDetail>;
export type AdminKey = AdminUserDetail['api_keys'][number];
/** GET /orgs: one organization */
export type AdminOrg = Static<typeof OrgSummary>;
/** GET /orgs/{org_id} */
export type AdminOrgDetail = Static<typeof OrgDetail>;
export type OrgMember = AdminOrgDetail['member_list'][number];
/** POST /users/{user_id}/keys/disable|enable */
export type KeyChange = Static<typeof KeyChangeAnswer>;
/** POST /credits */
export type GrantRequest = Static<typeof GrantBody>;
export type Grant = Static<typeof GrantAnswer>;
/** GET /usage */
export type AdminUsageQuery = Static<typeof UsageQuery>;
export type AdminUsage = Static<typeof AdminUsageReportSchema>;
export type AdminUsageRow = AdminUsage['list'][number];
/** GET /requests */
export type AdminRequestsQuery = Static<typeof RequestsQuery>;
export type AdminRequest = Static<typeof RequestSchema>;
export type AdminRequests = Paged<AdminRequest> & { start_time: number; end_time: number };
/** GET /requests/{request_id}: the row, its timings, the stored response */
export type AdminRequestDetail = Static<typeof RequestDetail>;
/** GET /budgets, POST /budgets */
export type Budget = Static<typeof BudgetSchema>;
export type BudgetWithSpend = Static<typeof BudgetListSchema>['list'][number];
export type BudgetRequest = Static<typeof BudgetBody>;
/** GET /operators */
export type Operator = Static<typeof OperatorSchema>;
/** GET /audit */
export type AuditQueryParams = Static<typeof AuditQuery>;
export type AuditEntry = Static<typeof AuditSchema>;

/** GET /models: every model with its source; POST, PUT, enable, disable answer one */
export type AdminModel = Static<typeof ModelItemSchema>;
export type AdminModels = Static<typeof ModelListSchema>;
/** POST /models/{name}/test */
export type ModelTestResult = Static<typeof ModelTestSchema>;

/** GET /health: every deployment's breaker, traffic and limits, summed over the instances */
export type AdminHealth = Static<typeof HealthAnswer>;
export type HealthDeployment = AdminHealth['deployments'][number];
export type BreakerState = HealthDeployment['state'];

/** a query string from defined values only */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** a path segment (a user or organization id may hold any character) */
export const seg = (s: string) => encodeURIComponent(s);
