import { AppError } from '../../platform/errors.js';
import { keyDigest, parseApiKey, type KeyKind } from '../../platform/auth/api-key-format.js';
import { DEFAULT_ORG } from '../../platform/auth/jwt.js';
import type { KeyStore, VerifiedKeyRow } from './store.js';
import type { KeyPrincipal } from '../../platform/auth/principal.js';

export type { KeyPrincipal } from '../../platform/auth/principal.js';

interface Entry {
  row: VerifiedKeyRow;
  principal: KeyPrincipal;
  fetchedAt: number;
}

/**
 * Verifies API keys. The shape and checksum are checked first (no database read for a malformed key),
 * then the HMAC digest is looked up in memory and, when the entry is older than `freshMs`, in the
 * database. Changes made in this process (revoke, delete, disable, update) drop the entry at once, so
 * they take effect on the very next request; other processes see them within `freshMs` or at once
 * through invalidate() when a change feed is wired (Redis or PostgreSQL notifications).
 */
export class KeyVerifier {
  private readonly cache = new Map<string, Entry>();
  private readonly lastUsedWritten = new Map<string, number>();
  /** reads in flight, so a stale entry under load is read once, not once per request */
  private readonly loading = new Map<string, Promise<VerifiedKeyRow | undefined>>();
  hits = 0;
  misses = 0;

  constructor(
    private readonly store: KeyStore,
    private readonly pepper: Buffer,
    private readonly freshMs: number,
    private readonly lastUsedIntervalMs: number,
    private readonly maxEntries = 100_000,
  ) {}

  invalidateDigest(digest: string) {
    this.invalidations++;
    this.cache.delete(digest);
    this.loading.delete(digest);
  }

  /** counts invalidations, so a read that raced one is used once but not cached */
  private invalidations = 0;

  clear() {
    this.cache.clear();
  }

  async verify(token: string, expected: KeyKind): Promise<KeyPrincipal> {
    const kind = parseApiKey(token);
    if (kind === null) throw new AppError('invalid_format');
    if (kind !== expected) {
      throw new AppError(
        'invalid_api_key',
        expected === 'inference'
          ? 'unauthorized: a Management API Key cannot call this endpoint; use an inference key (sk-...)'
          : 'unauthorized: an inference key cannot call the query APIs; use a Management API Key (mk-...)',
      );
    }
    const digest = keyDigest(this.pepper, token);
    const t = Date.now();
    let entry = this.cache.get(digest);
    if (entry && t - entry.fetchedAt <= this.freshMs) {
      this.hits++;
    } else {
      this.misses++;
      const before = this.invalidations;
      let load = this.loading.get(digest);
      if (!load) {
        const mine: Promise<VerifiedKeyRow | undefined> = this.store.findByDigest(digest).finally(() => {
          if (this.loading.get(digest) === mine) this.loading.delete(digest);
        });
        load = mine;
        this.loading.set(digest, load);
      }
      const row = await load;
      if (!row) {
        this.cache.delete(digest);
        throw new AppError('invalid_api_key');
      }
      entry = {
        row,
        fetchedAt: t,
        principal: {
          keyId: row.id,
          kind: row.kind,
          userId: row.user_id,
          orgId: row.org_id,
          scopes: row.scopes,
          rpmLimit: row.rpm_limit,
          tpmLimit: row.tpm_limit,
        },
      };
      if (this.invalidations === before) {
        if (this.cache.size >= this.maxEntries) this.cache.delete(this.cache.keys().next().value as string);
        this.cache.set(digest, entry);
      }
    }
    const row = entry.row;
    if (row.deleted_at !== null) throw new AppError('invalid_api_key');
    if (row.status === 'revoked') throw new AppError('api_key_revoked');
    if (row.status === 'disabled') throw new AppError('api_key_disabled');
    const nowS = Math.floor(t / 1000);
    if (row.expires_at !== 0 && row.expires_at <= nowS) throw new AppError('api_key_expired');
    // an org key speaks for the organization only while its maker administers it (docs/api.md, "Organization keys")
    if (row.org_id !== DEFAULT_ORG && row.owner_is_admin !== true) {
      throw new AppError(
        'permission_denied',
        `permission denied: this key belongs to organization '${row.org_id}' and the user who made it is no longer one of its administrators; an administrator of the organization can make a new key`,
      );
    }
    return entry.principal;
  }

  /**
   * The key's request is being served (it passed its scope, rate limit and budget): last_used_at moves, at most
   * once per interval per key, off the request's path. A refused request does not count as a use.
   */
  markUsed(key: KeyPrincipal) {
    this.noteUsed(key.keyId, Date.now());
  }

  private noteUsed(id: string, t: number) {
    const last = this.lastUsedWritten.get(id) ?? 0;
    if (t - last < this.lastUsedIntervalMs) return;
    this.lastUsedWritten.set(id, t);
    this.store.touchLastUsed(id, Math.floor(t / 1000)).catch(() => {
      // a failed touch is retried on a later request
      this.lastUsedWritten.set(id, last);
    });
  }
}
