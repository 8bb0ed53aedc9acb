import { AppError } from '../../platform/errors.js';
import { keyDigest, parseApiKey, type KeyKind } from '../../platform/auth/api-key-format.js';
import type { KeyRow, KeyStore } from './store.js';
import type { KeyPrincipal } from '../../platform/auth/principal.js';

export type { KeyPrincipal } from '../../platform/auth/principal.js';

const principalOf = (row: KeyRow): KeyPrincipal => ({
  keyId: row.id,
  kind: row.kind,
  userId: row.user_id,
  orgId: row.org_id,
  scopes: row.scopes,
  rpmLimit: row.rpm_limit,
  tpmLimit: row.tpm_limit,
});

interface Entry {
  row: KeyRow;
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
  private readonly loading = new Map<string, Promise<KeyRow | undefined>>();
  hits = 0;
  misses = 0;

  constructor(
    private readonly store: KeyStore,
    private readonly pepper: Buffer,
    private readonly freshMs: number,
    private readonly lastUsedIntervalMs: number,
    private readonly maxEntries = 100_000,
    /**
     * A stale entry is used while it is read again in the background, so no request waits for the database
     * once its key is known. Only where every change is made by this process and drops the entry at once:
     * the embedded PGlite, which one process owns (a change by another process would show one request late).
     */
    private readonly serveStale = false,
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
    } else if (entry && this.serveStale) {
      this.hits++;
      this.refresh(digest, t);
    } else {
      this.misses++;
      const before = this.invalidations;
      let load = this.loading.get(digest);
      if (!load) {
        const mine: Promise<KeyRow | undefined> = this.store.findByDigest(digest).finally(() => {
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
      entry = { row, fetchedAt: t, principal: principalOf(row) };
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
    this.noteUsed(row.id, t);
    return entry.principal;
  }

  /** Reads a stale entry again off the request's path (serveStale); one read per key at a time. */
  private refresh(digest: string, t: number) {
    if (this.loading.has(digest)) return;
    const before = this.invalidations;
    const mine: Promise<KeyRow | undefined> = this.store.findByDigest(digest).finally(() => {
      if (this.loading.get(digest) === mine) this.loading.delete(digest);
    });
    this.loading.set(digest, mine);
    mine.then(
      (row) => {
        if (this.invalidations !== before) return; // a change raced the read: the next request reads again
        const old = this.cache.get(digest);
        if (!row) this.cache.delete(digest);
        else if (old) Object.assign(old, { row, fetchedAt: t, principal: principalOf(row) });
      },
      () => {
        // the database is away: the entry stays stale and the next request tries again
      },
    );
  }

  /** Writes last_used_at at most once per interval per key, off the request's path. */
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
