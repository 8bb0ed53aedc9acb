import assert from 'node:assert/strict';
import type { LightMyRequestResponse } from 'fastify';
import type { TestApp } from '../helpers/app.js';
import type { VerifiedKeyRow } from '../../src/portal/keys/store.js';

export const MGMT = '/v1/portal/management/api-keys';
export const INFER = '/v1/portal/api-keys';

export type Caller = (method: string, url: string, token?: string, payload?: unknown, headers?: Record<string, string>) => Promise<LightMyRequestResponse>;

/** An inject helper: `token` goes in a Bearer header; objects are sent as JSON. */
export function caller(t: TestApp): Caller {
  return (method, url, token, payload, headers = {}) =>
    t.app.inject({
      method: method as any,
      url,
      headers: { ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}), ...headers },
      payload: payload as any,
    });
}

/** Asserts the portal's error envelope: status, non-zero meta.code, the message, request_id, data null. */
export function assertPortalError(res: LightMyRequestResponse, status: number, message?: string | RegExp, code?: number) {
  assert.equal(res.statusCode, status, `expected HTTP ${status}, got ${res.statusCode}: ${res.body}`);
  const body = res.json();
  assert.equal(typeof body.meta.code, 'number');
  assert.notEqual(body.meta.code, 0);
  if (code !== undefined) assert.equal(body.meta.code, code);
  assert.equal(typeof body.meta.message, 'string');
  assert.ok(body.meta.message.length > 0);
  assert.notEqual(body.meta.message, 'success');
  if (typeof message === 'string') assert.equal(body.meta.message, message);
  else if (message) assert.match(body.meta.message, message);
  assert.equal(typeof body.meta.request_id, 'string');
  assert.ok(body.meta.request_id.length > 0);
  assert.equal(body.meta.request_id, res.headers['x-request-id']);
  assert.equal(body.data, null);
  return body;
}

/** Asserts the OpenAI-shaped error of {base_url} routes. */
export function assertOpenAIError(res: LightMyRequestResponse, status: number, code?: string, message?: string | RegExp) {
  assert.equal(res.statusCode, status, `expected HTTP ${status}, got ${res.statusCode}: ${res.body}`);
  const body = res.json();
  assert.equal(typeof body.error?.message, 'string');
  if (code !== undefined) assert.equal(body.error.code, code);
  if (typeof message === 'string') assert.equal(body.error.message, message);
  else if (message) assert.match(body.error.message, message);
  return body;
}

export function assertOk(res: LightMyRequestResponse) {
  assert.equal(res.statusCode, 200, res.body);
  const body = res.json();
  assert.equal(body.meta.code, 0);
  assert.equal(body.meta.message, 'success');
  return body.data;
}

export const nowS = () => Math.floor(Date.now() / 1000);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `f` returns a truthy value (polling), or fails after `ms`. */
export async function eventually<T>(f: () => Promise<T>, ms = 2000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) assert.fail('condition not met in time');
    await sleep(20);
  }
}

/** Moves a key's expiry into the past directly in the database (no waiting). */
export async function expireInDb(t: TestApp, id: string) {
  await t.services.db.db
    .updateTable('api_keys')
    .set({ expires_at: nowS() - 10 })
    .where('id', '=', id)
    .execute();
}

/** A key row as the key store gives it to the verifier: an active inference key of user u1, default org, no limits. */
export const verifiedKeyRow = (over: Partial<VerifiedKeyRow> = {}): VerifiedKeyRow =>
  ({
    id: 'key_1',
    kind: 'inference',
    user_id: 'u1',
    org_id: 'default',
    scopes: [],
    rpm_limit: null,
    tpm_limit: null,
    status: 'active',
    deleted_at: null,
    expires_at: 0,
    ...over,
  }) as unknown as VerifiedKeyRow;
