import { signToken } from '../../src/platform/auth/jwt.js';
import type { TestApp } from '../helpers/app.js';

/** Who calls the admin API in these tests. */
export interface Callers {
  /** headers of an operator's token (recorded in the database) */
  operator: Record<string, string>;
  /** an administrator of the organization `acme` who is no operator */
  orgAdmin: Record<string, string>;
  /** a member of `acme` */
  member: Record<string, string>;
  /** a Management API Key without the admin scope (the operator's own) */
  plainKey: Record<string, string>;
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** makes `op` a recorded operator and the callers every security test uses */
export async function callers(t: TestApp, op = 'olga'): Promise<Callers> {
  await t.core.operators.add(op, 'cli', 'test');
  const operator = bearer(await t.token(op));
  const orgAdmin = bearer(await t.token('adam', { acme: 'admin' }));
  const member = bearer(await t.token('mia', { acme: 'member' }));
  const made = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers: operator, payload: { name: 'plain', scopes: ['usage:read'] } });
  if (made.statusCode !== 200) throw new Error(made.body);
  return { operator, orgAdmin, member, plainKey: bearer(made.json().data.api_key) };
}

/** a token with extra claims (an operator claim, groups) */
export function tokenWith(t: TestApp, userId: string, claims: Record<string, unknown>, orgRoles: Record<string, string> = {}) {
  return signToken(t.config.jwt.secret!, { userId, orgRoles, claims });
}

/** a management key with the admin scope, made by `headers`' user */
export async function adminKey(t: TestApp, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  const res = await t.app.inject({ method: 'POST', url: '/v1/portal/management/api-keys', headers, payload: { name: 'ops', scopes: ['admin'] } });
  return { status: res.statusCode, body: res.json() };
}

/** records usage of a key as a feature would (the ledger's one entrance) */
export async function use(
  t: TestApp,
  key: { keyId: string; userId: string; orgId?: string },
  o: { model?: string; cost?: number; input?: number; output?: number; deployment?: string; requestId?: string; audioOut?: number } = {},
) {
  await t.services.usage.record({
    requestId: o.requestId ?? `req_${Math.random().toString(36).slice(2)}`,
    key: { keyId: key.keyId, userId: key.userId, orgId: key.orgId ?? 'default' },
    model: o.model ?? 'm1',
    operation: 'responses',
    inputTokens: o.input ?? 10,
    outputTokens: o.output ?? 5,
    costMicros: Math.round((o.cost ?? 0.5) * 1_000_000),
    deployment: o.deployment,
    ...(o.audioOut !== undefined ? { outputAudioSeconds: o.audioOut } : {}),
  });
  await t.services.usage.flush();
}

/** every route of the admin API, with a payload that would succeed for an operator (security tests) */
export const ROUTES: Array<{ method: 'GET' | 'POST' | 'PUT' | 'DELETE'; url: string; payload?: unknown }> = [
  { method: 'GET', url: '/v1/admin/whoami' },
  { method: 'GET', url: '/v1/admin/audit' },
  { method: 'GET', url: '/v1/admin/operators' },
  { method: 'POST', url: '/v1/admin/operators', payload: { user_id: 'newop' } },
  { method: 'DELETE', url: '/v1/admin/operators/newop' },
  { method: 'GET', url: '/v1/admin/users' },
  { method: 'GET', url: '/v1/admin/users/olga' },
  { method: 'POST', url: '/v1/admin/users/olga/keys/disable', payload: { api_key_id: 'key_x' } },
  { method: 'POST', url: '/v1/admin/users/olga/keys/enable', payload: { api_key_id: 'key_x' } },
  { method: 'GET', url: '/v1/admin/orgs' },
  { method: 'GET', url: '/v1/admin/orgs/acme' },
  { method: 'PUT', url: '/v1/admin/orgs/acme/members/mia', payload: { role: 'admin' } },
  { method: 'POST', url: '/v1/admin/credits', payload: { user_id: 'mia', amount: 5 } },
  { method: 'GET', url: '/v1/admin/usage' },
  { method: 'GET', url: '/v1/admin/requests' },
  { method: 'GET', url: '/v1/admin/requests.csv' },
  { method: 'GET', url: '/v1/admin/budgets' },
  { method: 'POST', url: '/v1/admin/budgets', payload: { scope: 'user', target: 'mia', period: 'daily', limit: 1 } },
  { method: 'DELETE', url: '/v1/admin/budgets/budget_x' },
  { method: 'GET', url: '/v1/admin/health' },
  { method: 'GET', url: '/v1/admin/models' },
  { method: 'POST', url: '/v1/admin/models', payload: { entry: { name: 'sec-m', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', api_key: 'sk-x' } } },
  { method: 'PUT', url: '/v1/admin/models/sec-m', payload: { entry: { name: 'sec-m', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1' } } },
  { method: 'POST', url: '/v1/admin/models/sec-m/disable' },
  { method: 'POST', url: '/v1/admin/models/sec-m/enable' },
  { method: 'POST', url: '/v1/admin/models/sec-m/test', payload: {} },
  { method: 'DELETE', url: '/v1/admin/models/sec-m' },
];
