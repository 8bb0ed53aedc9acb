import { randomBytes } from 'node:crypto';
import { AppError, msg } from '../../platform/errors.js';
import { DEFAULT_ORG, isOrgAdmin, type UserPrincipal } from '../../platform/auth/jwt.js';
import { displayOf, displayParts, generateApiKey, keyDigest, type KeyKind } from '../../platform/auth/api-key-format.js';
import type { KeyRow, KeyStore } from './store.js';
import { assertScopes, OPERATOR_SCOPE } from './scopes.js';

/** The key record of spec section 2.2, as the portal shows it. */
export interface KeyRecord {
  id: string;
  org_id: string;
  name: string;
  description: string;
  status: KeyRow['status'];
  display: string;
  last_used_at: number;
  expires_at: number;
  created_at: number;
  scopes: string[];
  /** inference keys: requests and open WebSockets at once per instance (null = the server's KEY_MAX_CONCURRENCY) */
  max_concurrency?: number | null;
}

export interface CreatedKeyRecord extends KeyRecord {
  api_key: string;
}

export interface CreateKeyInput {
  org_id?: string;
  name: string;
  description?: string;
  expires_at?: number;
  scopes?: string[];
}

/** Listens for changes that make a cached verification stale (revoke, delete, disable, update, create). */
export type KeyChangeListener = (change: { id: string; digest: string; kind: KeyKind; what: 'created' | 'changed' }) => void;

export function toRecord(row: KeyRow): KeyRecord {
  return {
    id: row.id,
    org_id: row.org_id,
    name: row.name,
    description: row.description,
    status: row.status,
    display: displayOf(row.display_prefix, row.display_suffix),
    last_used_at: row.last_used_at,
    expires_at: row.expires_at,
    created_at: row.created_at,
    scopes: row.scopes,
    ...(row.kind === 'inference' ? { max_concurrency: row.max_concurrency } : {}),
  };
}

const now = () => Math.floor(Date.now() / 1000);

function newKeyId(kind: KeyKind): string {
  // 16 random bytes, base64url: unguessable, URL-safe
  return (kind === 'management' ? 'mkey_' : 'key_') + randomBytes(16).toString('base64url');
}

/**
 * The six key operations, for one kind of key (management keys for the query APIs, inference keys for
 * {base_url}). Both kinds share this code; only the prefix and the active limit differ.
 */
export class KeyService {
  private readonly listeners: KeyChangeListener[] = [];

  constructor(
    readonly kind: KeyKind,
    private readonly store: KeyStore,
    private readonly pepper: Buffer,
    private readonly activeLimit: number,
    private readonly adminRole: string,
    /** the highest max_concurrency a key's owner may set: the server's KEY_MAX_CONCURRENCY (0 = unlimited: no bound) */
    private readonly maxConcurrency = 0,
  ) {}

  onChange(l: KeyChangeListener) {
    this.listeners.push(l);
  }

  private declaredRouteScopes: readonly string[] = [];
  /**
   * The endpoint families inference keys may name: the features' route scopes, collected by the runtime from the
   * feature modules (src/compose/declarations.ts). Before it is told (a core without a runtime), none.
   */
  get routeScopes(): readonly string[] {
    return this.declaredRouteScopes;
  }

  useRouteScopes(scopes: readonly string[]) {
    this.declaredRouteScopes = [...scopes];
  }

  private emit(row: KeyRow, what: 'created' | 'changed') {
    for (const l of this.listeners) l({ id: row.id, digest: row.digest, kind: this.kind, what });
  }

  private mayHoldOperatorScope?: (user: UserPrincipal) => Promise<boolean>;
  /**
   * Who may make a Management API Key with the operator scope (an operator: the operators service answers); until
   * it is told, no one may.
   */
  guardOperatorScope(may: (user: UserPrincipal) => Promise<boolean>) {
    this.mayHoldOperatorScope = may;
  }

  async create(user: UserPrincipal, input: CreateKeyInput): Promise<CreatedKeyRecord> {
    assertScopes(this.kind, input.scopes ?? [], this.declaredRouteScopes);
    const orgId = input.org_id === undefined || input.org_id === '' ? DEFAULT_ORG : input.org_id;
    if (this.kind === 'management' && input.scopes?.includes(OPERATOR_SCOPE)) {
      if (!this.mayHoldOperatorScope || !(await this.mayHoldOperatorScope(user))) {
        throw new AppError('permission_denied', msg('key_operator_scope_operators_only', { scope: OPERATOR_SCOPE }), 'scopes');
      }
      if (orgId !== DEFAULT_ORG) throw new AppError('validation_error', msg('key_operator_scope_personal', { scope: OPERATOR_SCOPE }), 'org_id', { detail: 'invalid_value' });
    }
    if (orgId !== DEFAULT_ORG && !isOrgAdmin(user, orgId, this.adminRole)) {
      throw new AppError('permission_denied', msg('key_org_admin_required'), 'org_id');
    }
    const t = now();
    const expiresAt = input.expires_at ?? 0;
    if (expiresAt !== 0 && expiresAt <= t) throw new AppError('invalid_expires_at', undefined, 'expires_at');
    const key = generateApiKey(this.kind);
    const { prefix, suffix } = displayParts(key);
    const row: KeyRow = {
      id: newKeyId(this.kind),
      kind: this.kind,
      user_id: user.userId,
      org_id: orgId,
      name: input.name,
      description: input.description ?? '',
      status: 'active',
      digest: keyDigest(this.pepper, key),
      display_prefix: prefix,
      display_suffix: suffix,
      scopes: input.scopes ?? [],
      expires_at: expiresAt,
      last_used_at: 0,
      created_at: t,
      updated_at: t,
      deleted_at: null,
      rpm_limit: null,
      tpm_limit: null,
      max_concurrency: null,
    };
    const ok = await this.store.insertWithinLimit(row, this.activeLimit, t, Math.min(user.issuedAt ?? t, t));
    if (!ok) {
      throw new AppError('active_key_limit', msg('key_limit_create', { limit: this.activeLimit }));
    }
    this.emit(row, 'created');
    return { ...toRecord(row), api_key: key };
  }

  async list(
    user: UserPrincipal,
    q: { status?: KeyRow['status']; page: number; per_page: number; org_id?: string; search?: string },
  ): Promise<{ list: KeyRecord[]; total: number; page: number; per_page: number }> {
    if (q.org_id !== undefined && q.org_id !== DEFAULT_ORG && !isOrgAdmin(user, q.org_id, this.adminRole)) {
      throw new AppError('permission_denied', msg('key_list_admins_only', { org: q.org_id }), 'org_id');
    }
    const { rows, total } = await this.store.list({
      kind: this.kind,
      userId: user.userId,
      adminOrgs: this.adminOrgs(user),
      orgId: q.org_id,
      status: q.status,
      search: q.search?.trim(),
      limit: q.per_page,
      offset: (q.page - 1) * q.per_page,
    });
    return { list: rows.map(toRecord), total, page: q.page, per_page: q.per_page };
  }

  private adminOrgs(user: UserPrincipal): string[] {
    return Object.keys(user.orgRoles).filter((o) => o !== DEFAULT_ORG && isOrgAdmin(user, o, this.adminRole));
  }

  /**
   * The key the caller may manage (docs/api.md, "Organization keys"): a personal key by its owner; an org key by
   * any administrator of the org now, whoever made it. Its maker, once no longer an administrator, is told so
   * (403); anyone else gets 404, as for a key that does not exist.
   */
  private async manageable(user: UserPrincipal, id: string): Promise<KeyRow> {
    const row = await this.store.getById(this.kind, id);
    if (!row) throw notFound();
    if (row.org_id === DEFAULT_ORG) {
      if (row.user_id !== user.userId) throw notFound();
      return row;
    }
    if (isOrgAdmin(user, row.org_id, this.adminRole)) return row;
    if (row.user_id === user.userId) {
      throw new AppError('permission_denied', msg('key_managed_by_admins', { org: row.org_id }), 'api_key_id');
    }
    throw notFound();
  }

  /** A change made elsewhere (the maker's role in the org changed): drop cached verifications. */
  changed(row: KeyRow) {
    this.emit(row, 'changed');
  }

  /** The active limit and how many places the user's keys of this kind take in each organization. */
  async activeSummary(user: UserPrincipal): Promise<{ limit: number; active: Record<string, number> }> {
    return { limit: this.activeLimit, active: await this.store.activeCounts(this.kind, user.userId, now()) };
  }

  async get(user: UserPrincipal, id: string): Promise<KeyRecord> {
    return toRecord(await this.manageable(user, id));
  }

  /**
   * Name, description and (inference keys) max_concurrency. The owner may lower the key's concurrency below the
   * server's default, or give null for the default; raising it above KEY_MAX_CONCURRENCY is refused, since a
   * key's share of the instance is the operator's to give (the same holds for rpm/tpm, set by `portico keys limit`).
   */
  async update(user: UserPrincipal, id: string, patch: { name?: string; description?: string; max_concurrency?: number | null }): Promise<KeyRecord> {
    if (patch.max_concurrency !== undefined) {
      if (this.kind !== 'inference') throw new AppError('validation_error', msg('key_concurrency_inference_only'), 'max_concurrency');
      if (patch.max_concurrency !== null && this.maxConcurrency > 0 && patch.max_concurrency > this.maxConcurrency) {
        throw new AppError('validation_error', msg('key_concurrency_over_default', { max: this.maxConcurrency }), 'max_concurrency');
      }
    }
    const owner = (await this.manageable(user, id)).user_id;
    const row = await this.store.updateOwned(this.kind, owner, id, { ...patch, updated_at: now() });
    if (!row) throw notFound();
    this.emit(row, 'changed');
    return toRecord(row);
  }

  async delete(user: UserPrincipal, id: string): Promise<KeyRecord> {
    const owner = (await this.manageable(user, id)).user_id;
    const t = now();
    const row = await this.store.updateOwned(this.kind, owner, id, { deleted_at: t, updated_at: t });
    if (!row) throw notFound();
    this.emit(row, 'changed');
    return toRecord(row);
  }

  /**
   * Revokes an owned key (idempotent: revoking a revoked key answers its record again). A key the operator
   * disabled stays as it is: revoke-then-restore would otherwise turn it active again, and only the operator
   * may lift a disable (spec 3.1: no user-facing operation sets or clears it).
   */
  async revoke(user: UserPrincipal, id: string): Promise<KeyRecord> {
    const owner = (await this.manageable(user, id)).user_id;
    const row = await this.store.updateOwned(this.kind, owner, id, { status: 'revoked', updated_at: now() }, ['active', 'revoked']);
    if (!row) {
      const existing = await this.store.getOwned(this.kind, owner, id);
      if (existing?.status === 'disabled') throw new AppError('invalid_state', msg('key_disabled_by_operator'), 'api_key_id');
      throw notFound();
    }
    this.emit(row, 'changed');
    return toRecord(row);
  }

  async restore(user: UserPrincipal, id: string): Promise<KeyRecord> {
    const owner = (await this.manageable(user, id)).user_id;
    const r = await this.store.restoreWithinLimit(this.kind, owner, id, this.activeLimit, now());
    if (r === 'not_found') throw notFound();
    if (r === 'not_revoked') throw new AppError('invalid_state', msg('key_restore_only_revoked'), 'api_key_id');
    if (r === 'limit') throw new AppError('active_key_limit', msg('key_limit_restore', { limit: this.activeLimit }));
    this.emit(r, 'changed');
    return toRecord(r);
  }

  /** Operator command (CLI): per-key requests and tokens per minute (null = the configured default, 0 = unlimited). */
  async setLimits(id: string, rpm: number | null, tpm: number | null): Promise<KeyRow> {
    const row = await this.store.setLimitsById(id, rpm, tpm, now());
    if (!row) throw notFound();
    this.emit(row, 'changed');
    return row;
  }

  /**
   * Operator command (CLI): an inference key's requests and open WebSockets at once per instance, any value (null =
   * KEY_MAX_CONCURRENCY, 0 = unlimited); unlike its owner, the operator may raise it above the default.
   */
  async setConcurrency(id: string, max: number | null): Promise<KeyRow> {
    if (this.kind !== 'inference') throw new AppError('validation_error', msg('key_concurrency_inference_only'), 'max_concurrency');
    const row = await this.store.setConcurrencyById(id, max, now());
    if (!row) throw notFound();
    this.emit(row, 'changed');
    return row;
  }

  /** Operator commands (CLI): the spec's `disabled` status, which no user-facing operation sets. */
  async setDisabled(id: string, disabled: boolean): Promise<KeyRecord> {
    if (disabled) {
      const row = await this.store.setStatusById(id, 'disabled', now());
      if (!row) throw notFound();
      this.emit(row, 'changed');
      return toRecord(row);
    }
    // enable lifts a disable only: it does not revive a revoked key, nor go past the active limit
    const r = await this.store.enableWithinLimit(this.kind, id, this.activeLimit, now());
    if (r === 'not_found') throw notFound();
    if (r === 'not_disabled') throw new AppError('invalid_state', msg('key_enable_only_disabled'), 'api_key_id');
    if (r === 'limit') throw new AppError('active_key_limit', msg('key_limit_enable', { limit: this.activeLimit }));
    this.emit(r, 'changed');
    return toRecord(r);
  }
}

function notFound() {
  return new AppError('api_key_not_found', undefined, 'api_key_id');
}
