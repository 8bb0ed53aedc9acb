import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { AppError, msg } from '../../platform/errors.js';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { bearerToken } from '../../platform/http/auth.js';
import { looksLikeApiKey } from '../../platform/auth/api-key-format.js';
import { DEFAULT_ORG, isOrgAdmin, type JwtVerifier, type UserPrincipal } from '../../platform/auth/jwt.js';
import type { KeyVerifier } from '../keys/verifier.js';
import type { UsageService } from '../usage/service.js';
import type { UsageScope, GroupBy } from '../usage/store.js';
import { BalanceSchema, UsageQuerySchema, UsageReportSchema } from './schemas.js';
import type { FeatureModule } from '../../platform/module.js';
import { QUERY_SCOPES } from '../keys/scopes.js';

export interface QueryDeps {
  jwt: JwtVerifier;
  verifier: KeyVerifier;
  usage: UsageService;
  adminRole: string;
  /** BILLING_ENABLED: whether a spent balance refuses requests (the balance answer says so) */
  billingEnabled: boolean;
  /**
   * How a portal user is recognized when the caller sends no API key (default: the bearer JWT). The web page
   * passes the one that also accepts its session cookie.
   */
  authenticate?: (req: FastifyRequest) => Promise<UserPrincipal>;
}

/** Scopes of Management API Keys (src/portal/keys/scopes.ts); a key created without scopes may call every query API. */
export { QUERY_SCOPES };

/**
 * Who may see what: a Management API Key sees its own scope (personal keys: the owner's records in the
 * personal scope; org keys, which only org admins can create: the whole org). A portal user with a JWT
 * sees their personal scope, or an org's when they are its admin and pass org_id.
 */
async function resolveScope(req: FastifyRequest, deps: QueryDeps, scope: string, orgParam?: string): Promise<UsageScope> {
  const token = req.headers.authorization === undefined && deps.authenticate ? undefined : bearerToken(req);
  if (token !== undefined && looksLikeApiKey(token)) {
    const key = await deps.verifier.verify(token, 'management', req.ip);
    if (key.scopes.length > 0 && !key.scopes.includes(scope)) {
      throw new AppError('insufficient_scope', msg('query_scope_missing', { scope }));
    }
    if (orgParam !== undefined && orgParam !== key.orgId) throw new AppError('permission_denied', msg('query_other_org'), 'org_id');
    deps.verifier.markUsed(key);
    return key.orgId === DEFAULT_ORG ? { orgId: DEFAULT_ORG, userId: key.userId } : { orgId: key.orgId };
  }
  const user = deps.authenticate ? await deps.authenticate(req) : await deps.jwt.verify(token!);
  const org = orgParam ?? DEFAULT_ORG;
  if (org === DEFAULT_ORG) return { orgId: DEFAULT_ORG, userId: user.userId };
  if (!isOrgAdmin(user, org, deps.adminRole)) throw new AppError('permission_denied', msg('query_org_admin_only'), 'org_id');
  return { orgId: org };
}

/** The query APIs take a Management API Key (the apiKey scheme) or a portal JWT, for the OpenAPI document. */
const QUERY_SECURITY: Array<Record<string, string[]>> = [{ apiKey: [] }, { portalJwt: [] }];

export function registerQueryRoutes(app: FastifyInstance, deps: QueryDeps) {
  const r = app.withTypeProvider<TypeBoxTypeProvider>();
  r.get(
    '/query/usage',
    {
      config: { auth: 'own' },
      schema: {
        tags: ['Query APIs'],
        summary: "Usage of the caller's keys over a time range, grouped (Management API Key with usage:read, or a portal JWT)",
        // a Management API Key (mk-...) or a portal JWT: the route checks either itself (auth 'own')
        security: QUERY_SECURITY,
        querystring: UsageQuerySchema,
        response: { 200: envelope(UsageReportSchema) },
      },
    },
    async (req) => {
      const scope = await resolveScope(req, deps, QUERY_SCOPES.usage, req.query.org_id);
      const now = Math.floor(Date.now() / 1000);
      const to = req.query.end_time ?? now + 1;
      const from = req.query.start_time ?? to - 30 * 86400;
      if (from >= to) throw new AppError('validation_error', msg('query_time_order'), 'start_time');
      const groupBy = [...new Set((req.query.group_by ?? 'day,model').split(','))] as GroupBy[];
      return ok(req, await deps.usage.usage({ ...scope, keyId: req.query.key_id }, from, to, groupBy));
    },
  );
  r.get(
    '/query/balance',
    {
      config: { auth: 'own' },
      schema: {
        tags: ['Query APIs'],
        summary: 'Credits granted minus cost used (Management API Key with balance:read, or a portal JWT)',
        security: QUERY_SECURITY,
        querystring: Type.Object({ org_id: Type.Optional(Type.String({ maxLength: 100 })) }, { additionalProperties: false }),
        response: {
          200: envelope(BalanceSchema),
        },
      },
    },
    async (req) => ok(req, { ...(await deps.usage.balance(await resolveScope(req, deps, QUERY_SCOPES.balance, req.query.org_id))), billing_enabled: deps.billingEnabled }),
  );
}

/** The query APIs (usage, balance) under {portal_base_url}. */
export function createQueryModule(deps: QueryDeps): FeatureModule {
  return { name: 'query', routes: { portal: (app) => registerQueryRoutes(app, deps) } };
}
