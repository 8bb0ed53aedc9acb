import { hash } from 'node:crypto';
import { AppError, msg } from '../../platform/errors.js';
import { keyDigest, parseApiKey, type KeyKind } from '../../platform/auth/api-key-format.js';
import { DEFAULT_ORG } from '../../platform/auth/jwt.js';
import type { KeyStore, VerifiedKeyRow } from './store.js';
import type { KeyPrincipal } from '../../platform/auth/principal.js';

export type { KeyPrincipal } from '../../platform/auth/principal.js';

/**
 * Failed key checks (issue 9, §2): a well-formed key that is not in the database costs a database read. A key
 * found missing is remembered (`freshMs`, at most MISSING_MAX keys), so the same forged key is read once; and a
 * source (the client's address) whose checks failed FAILED_LIMIT times within FAILED_WINDOW_MS has its next
 * lookups refused without a read (429, retry-after) until the window ends. Keys already verified and cached
 * still pass: a flood of forged keys does not lock out the clients whose keys are known.
 */
export const FAILED_LIMIT = 20;
export const FAILED_WINDOW_MS = 10_000;
const MISSING_MAX = 10_000;
const SOURCES_MAX = 10_000;

const principalOf = (row: VerifiedKeyRow): KeyPrincipal => ({
  keyId: row.id,
  kind: row.kind,
  userId: row.user_id,
  orgId: row.org_id,
  scopes: row.scopes,
  rpmLimit: row.rpm_limit,
  tpmLimit: row.tpm_limit,
  maxConcurrency: row.max_concurrency,
});

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
  /** digests found missing: when (ms) */
  private readonly missing = new Map<string, number>();
  /** failed checks per source in the current window */
  private readonly failures = new Map<string, { since: number; count: number }>();
  /**
   * The HMAC digest of each key checked, found by the key's SHA-256: a key's digest is computed once, not on
   * every request (createHmac builds an object and a key each time: 1.7 µs, ~2% of the main thread's samples
   * under load; the one-shot hash is 0.25 µs). The key itself is not kept: a memory dump shows an unkeyed hash of a
   * 190-bit random key, which cannot be reversed or looked up. Bounded like the cache.
   */
  private readonly digests = new Map<string, string>();
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
    this.missing.delete(digest);
    this.cache.delete(digest);
    this.loading.delete(digest);
  }

  /** counts invalidations, so a read that raced one is used once but not cached */
  private invalidations = 0;

  clear() {
    this.cache.clear();
    this.missing.clear();
  }

  /** a failed check by `source`; refuses (429) once the source is over its limit */
  private failed(source: string | undefined, t: number) {
    if (source === undefined) return;
    let f = this.failures.get(source);
    if (!f || t - f.since > FAILED_WINDOW_MS) {
      this.failures.delete(source);
      if (this.failures.size >= SOURCES_MAX) this.failures.delete(this.failures.keys().next().value as string);
      f = { since: t, count: 0 };
      this.failures.set(source, f);
    }
    f.count++;
  }

  private throttled(source: string | undefined, t: number): void {
    const f = source === undefined ? undefined : this.failures.get(source);
    if (!f || f.count < FAILED_LIMIT || t - f.since > FAILED_WINDOW_MS) return;
    const wait = Math.max(1, Math.ceil((f.since + FAILED_WINDOW_MS - t) / 1000));
    throw new AppError('rate_limit_exceeded', msg('key_failed_checks', { wait }), null, { headers: { 'retry-after': String(wait) } });
  }

  /** `source`: who is asking (the client's address), for the throttle of failed checks */
  async verify(token: string, expected: KeyKind, source?: string): Promise<KeyPrincipal> {
    const kind = parseApiKey(token);
    if (kind === null) throw new AppError('invalid_format');
    if (kind !== expected) {
      throw new AppError('invalid_api_key', msg(expected === 'inference' ? 'key_management_not_inference' : 'key_inference_not_management'));
    }
    const digest = this.digestOf(token);
    const t = Date.now();
    let entry = this.cache.get(digest);
    if (entry && t - entry.fetchedAt < this.freshMs) {
      this.hits++;
    } else if (entry && this.serveStale) {
      this.hits++;
      this.refresh(digest, t);
    } else {
      const gone = this.missing.get(digest);
      if (gone !== undefined && t - gone < this.freshMs) {
        this.failed(source, t);
        throw new AppError('invalid_api_key');
      }
      this.throttled(source, t);
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
        if (this.invalidations === before) {
          this.missing.delete(digest);
          if (this.missing.size >= MISSING_MAX) this.missing.delete(this.missing.keys().next().value as string);
          this.missing.set(digest, t);
        }
        this.failed(source, t);
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
    // an org key speaks for the organization only while its maker administers it (docs/api.md, "Organization keys")
    if (row.org_id !== DEFAULT_ORG && row.owner_is_admin !== true) {
      throw new AppError('permission_denied', msg('key_maker_not_admin', { org: row.org_id }));
    }
    return entry.principal;
  }

  private digestOf(token: string): string {
    const fast = hash('sha256', token, 'base64');
    let digest = this.digests.get(fast);
    if (digest === undefined) {
      digest = keyDigest(this.pepper, token);
      if (this.digests.size >= this.maxEntries) this.digests.delete(this.digests.keys().next().value as string);
      this.digests.set(fast, digest);
    }
    return digest;
  }

  /**
   * The key's request is being served (it passed its scope, rate limit and budget): last_used_at moves, at most
   * once per interval per key, off the request's path. A refused request does not count as a use.
   */
  markUsed(key: KeyPrincipal) {
    this.noteUsed(key.keyId, Date.now());
  }

  /** Reads a stale entry again off the request's path (serveStale); one read per key at a time. */
  private refresh(digest: string, t: number) {
    if (this.loading.has(digest)) return;
    const before = this.invalidations;
    const mine: Promise<VerifiedKeyRow | undefined> = this.store.findByDigest(digest).finally(() => {
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
