import { hash } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { AppError, msg } from '../../platform/errors.js';
import { keyDigest, parseApiKey, type KeyKind } from '../../platform/auth/api-key-format.js';
import { DEFAULT_ORG } from '../../platform/auth/jwt.js';
import type { KeyStore, VerifiedKeyRow } from './store.js';
import type { KeyPrincipal } from '../../platform/auth/principal.js';

export type { KeyPrincipal } from '../../platform/auth/principal.js';

/**
 * Failed key checks (issue 9, §2; issue 22, §2): a well-formed key that is not in the database costs a database
 * read. A key found missing is remembered (`freshMs`, at most MISSING_MAX keys), so the same forged key is read
 * once; and a source (the client's address, `req.ip`) whose checks failed FAILED_LIMIT times within
 * FAILED_WINDOW_MS has its lookups of *unknown* keys refused without a read (429, retry-after) until the window
 * ends. A key that exists is never throttled: one with an entry in the cache (fresh or stale) is served or read
 * again, and one that is not cached is recognized by the set of existing keys the verifier keeps (loadKnown(),
 * one query at start; added to when a key is made here, or elsewhere through the change feed's "created"
 * notice). A throttled key that is not in the set may have been made on another instance a moment ago, its
 * notice still on the way: unless this process makes every key (PGlite), it waits for one read of the newest
 * keys (catchUp), shared by every such request and made at most once per CATCHUP_MS, before it is refused.
 */
export const FAILED_LIMIT = 20;
export const FAILED_WINDOW_MS = 10_000;
const MISSING_MAX = 10_000;
const SOURCES_MAX = 10_000;
/** existing keys the set holds (~40 bytes each); beyond it the oldest are left out and are throttled as before */
export const KNOWN_MAX = 1_000_000;
/** at most one read of the newest keys this often, whatever the number of throttled requests */
export const CATCHUP_MS = 1_000;
/** keys read by one catch-up */
const CATCHUP_ROWS = 10_000;
/**
 * A catch-up reads the keys after the highest seq seen by a read that started at least this long ago: a key's seq is
 * taken at its insert and it becomes visible at its commit, so a key with a lower seq may commit after one seen.
 */
const CATCHUP_SLACK_MS = 60_000;

/**
 * The set of existing keys holds a 52-bit number taken from each digest (an HMAC under the pepper: a forged key
 * cannot aim at one), not the 64-character digest: a third of the memory, and nothing to retain.
 */
const tagOf = (digest: string): number => parseInt(digest.slice(0, 13), 16);

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
  /** reads of the newest keys made for throttled unknown keys (catchUp) */
  catchUps = 0;
  /** the keys that exist (tagOf their digests): loadKnown(), then noteCreated() and every key read */
  private readonly known = new Set<number>();
  /** 'none' until loadKnown() (unknown keys are throttled as before), 'partial' when KNOWN_MAX left keys out */
  private knownState: 'none' | 'partial' | 'complete' = 'none';
  /** the highest seq seen by each read of keys (load, catch-ups), oldest first: where the next catch-up starts */
  private marks: Array<{ at: number; seq: number }> = [];
  private catchUpRunning?: { startedAt: number; done: Promise<void> };
  private catchUpNext?: Promise<void>;
  private lastCatchUpAt = -Infinity;
  /** when the latest request waiting for a catch-up arrived */
  private latestArrival = -Infinity;

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
    /**
     * Every key is made by this process (the embedded PGlite): the set of existing keys is the truth, and a
     * throttled key that is not in it is refused without any read.
     */
    private readonly makesEveryKey = serveStale,
  ) {}

  /** Loads the set of existing keys (one query, at most KNOWN_MAX + 1 rows); the runtime calls it once at start. */
  async loadKnown(): Promise<{ keys: number; complete: boolean }> {
    const at = Date.now();
    const rows = await this.store.knownDigests(KNOWN_MAX + 1);
    const complete = rows.length <= KNOWN_MAX;
    let seq = 0;
    for (let i = 0; i < rows.length && i < KNOWN_MAX; i++) {
      const r = rows[i]!;
      this.known.add(tagOf(r.digest));
      if (r.seq > seq) seq = r.seq;
    }
    this.marks = [{ at, seq }];
    this.knownState = complete ? 'complete' : 'partial';
    return { keys: this.known.size, complete };
  }

  /** A key was made (here, or on another instance as the change feed says): it exists from now on. */
  noteCreated(digest: string) {
    this.invalidateDigest(digest);
    this.remember(digest);
  }

  /** adds an existing key to the set, within KNOWN_MAX (past it the set no longer knows every key) */
  private remember(digest: string) {
    const tag = tagOf(digest);
    if (this.known.size < KNOWN_MAX) this.known.add(tag);
    else if (!this.known.has(tag) && this.knownState === 'complete') this.knownState = 'partial';
  }

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

  /** whether `source` failed FAILED_LIMIT checks in its current window */
  private overLimit(source: string | undefined, t: number): boolean {
    const f = source === undefined ? undefined : this.failures.get(source);
    return f !== undefined && f.count >= FAILED_LIMIT && t - f.since <= FAILED_WINDOW_MS;
  }

  /** refuses a lookup of an unknown key from a source over its limit: 429 until its window ends */
  private refuse(source: string | undefined, t: number): never {
    const f = this.failures.get(source as string);
    const wait = f ? Math.max(1, Math.ceil((f.since + FAILED_WINDOW_MS - t) / 1000)) : 1;
    throw new AppError('rate_limit_exceeded', msg('key_failed_checks', { wait }), null, { headers: { 'retry-after': String(wait) } });
  }

  /**
   * Whether a key that is not cached exists, without a read of its own: the set of existing keys; else, when
   * another process may have made it a moment ago (its notice still on the way), the first read of the newest
   * keys that starts after `arrival`.
   */
  private async exists(digest: string, arrival: number): Promise<boolean> {
    const tag = tagOf(digest);
    if (this.known.has(tag)) return true;
    // not loaded (a verifier built alone), or too many keys to hold: unknown keys are throttled as before
    if (this.knownState !== 'complete' || this.makesEveryKey) return false;
    await this.catchUp(arrival);
    return this.known.has(tag);
  }

  /**
   * One read of the keys made since the last ones seen, shared: a request waits for the first read that starts
   * after it arrived (a key it carries was committed before then), and reads start at most once per CATCHUP_MS.
   */
  private catchUp(arrival: number): Promise<void> {
    const running = this.catchUpRunning;
    if (running !== undefined && running.startedAt > arrival) return running.done;
    if (this.latestArrival < arrival) this.latestArrival = arrival;
    if (this.catchUpNext === undefined) this.catchUpNext = this.nextCatchUp(running?.done);
    return this.catchUpNext;
  }

  private async nextCatchUp(previous: Promise<void> | undefined): Promise<void> {
    await previous;
    for (;;) {
      const now = Date.now();
      // at most one per CATCHUP_MS, and strictly after every waiting request arrived (Date.now() counts whole ms)
      const wait = Math.max(this.lastCatchUpAt + CATCHUP_MS - now, now <= this.latestArrival ? 1 : 0);
      if (wait <= 0) break;
      await delay(wait);
    }
    // from here to the read's start nothing awaits: no request can join this catch-up after it started
    this.catchUpNext = undefined;
    const startedAt = Date.now();
    this.lastCatchUpAt = startedAt;
    const done = this.readNewKeys(startedAt).finally(() => {
      if (this.catchUpRunning?.done === done) this.catchUpRunning = undefined;
    });
    this.catchUpRunning = { startedAt, done };
    await done;
  }

  private async readNewKeys(startedAt: number): Promise<void> {
    this.catchUps++;
    // after the highest seq seen by a read that started CATCHUP_SLACK_MS ago or more (else the oldest read kept)
    const marks = this.marks;
    let from = 0;
    for (let i = 0; i < marks.length; i++) if (marks[i]!.at <= startedAt - CATCHUP_SLACK_MS) from = i;
    if (from > 0) this.marks = marks.slice(from);
    const after = this.marks[0]?.seq ?? 0;
    let rows: Array<{ digest: string; seq: number }>;
    try {
      rows = await this.store.digestsAfter(after, CATCHUP_ROWS);
    } catch {
      return; // the database is away: the key is taken as unknown, and the next throttled request reads again
    }
    let seq = after;
    for (const r of rows) {
      this.remember(r.digest);
      if (r.seq > seq) seq = r.seq;
    }
    this.marks.push({ at: startedAt, seq });
  }

  /** `source`: who is asking (the client's address), for the throttle of failed checks */
  async verify(token: string, expected: KeyKind, source?: string): Promise<KeyPrincipal> {
    const kind = parseApiKey(token);
    if (kind === null) throw new AppError('invalid_format');
    if (kind !== expected) {
      throw new AppError('invalid_api_key', msg(expected === 'inference' ? 'key_management_not_inference' : 'key_inference_not_management'));
    }
    return this.verifyDigest(this.digestOf(token), source);
  }

  /**
   * Verifies the key whose digest this is, as verify() does once the key is read: the digest of a key a client
   * secret was minted from (src/portal/keys/client-secrets.ts), which holds the digest and never the key.
   */
  async verifyDigest(digest: string, source?: string): Promise<KeyPrincipal> {
    const t = Date.now();
    let entry = this.cache.get(digest);
    if (entry && t - entry.fetchedAt < this.freshMs) {
      this.hits++;
    } else if (entry && this.serveStale) {
      this.hits++;
      this.refresh(digest, t);
    } else {
      if (entry === undefined) {
        const gone = this.missing.get(digest);
        if (gone !== undefined && t - gone < this.freshMs) {
          this.failed(source, t);
          throw new AppError('invalid_api_key');
        }
        // only unknown keys are throttled: a cached entry (even stale) or a key in the set of existing ones is read
        if (this.overLimit(source, t) && !(await this.exists(digest, t))) this.refuse(source, t);
      }
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
      this.remember(digest);
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

  /** the digest a well-formed key is stored under (a client secret is minted with it) */
  digestOf(token: string): string {
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
