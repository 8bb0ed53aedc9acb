/**
 * Entra ID (Azure AD) client credentials for Azure OpenAI: an app's tenant, client id and secret exchanged for an
 * access token at `POST {authority}/{tenant}/oauth2/v2.0/token` (grant_type=client_credentials, scope
 * https://cognitiveservices.azure.com/.default, form-encoded), as the Azure SDK's ClientSecretCredential does.
 *
 * One token cache per credential (authority, tenant, client, secret and the token call's timeouts), shared by every
 * engine that names it:
 * - nothing is fetched when an engine is made: the first request that needs the token fetches it;
 * - concurrent requests share one fetch (one call in flight, the others wait on it);
 * - a token serves until its lifetime minus a margin (min(5 min, half the lifetime)); the next request after that
 *   fetches a fresh one. A refresh that fails while the old token has not expired yet keeps serving the old one
 *   (an Entra hiccup near the end of a token's life does not fail requests) and is tried again 10 s later;
 * - a token Azure refused (401) is dropped (`refused`), so the next request fetches a new one;
 * - a failed fetch is an EngineError for the requests that waited on it (a 502 that says the credential could not
 *   be obtained: never the secret, never Entra's whole answer), and nothing of it is kept: the next request tries
 *   again.
 * The client secret and every token issued are removed from any text `redact` is given (an upstream that echoes its
 * request). Nothing here logs.
 */
import { createHash } from 'node:crypto';
import { EngineError } from '../types.js';
import { parseErrorBody, Upstream } from '../shared/http.js';
import { redactSecrets } from '../shared/redact.js';

/** the audience of Azure OpenAI (Cognitive Services) tokens, as the AzureOpenAI client asks for it */
export const COGNITIVE_SERVICES_SCOPE = 'https://cognitiveservices.azure.com/.default';
/** the public cloud's authority (the Azure SDK's default; AZURE_AUTHORITY_HOST overrides it there and here) */
export const DEFAULT_AUTHORITY_HOST = 'https://login.microsoftonline.com';
/** the longest a token call may take when the deployment's timeout_ms is longer (or unset) */
export const TOKEN_TIMEOUT_MS = 30_000;
/** a refresh that failed while the old token still served is tried again after this long */
export const REFRESH_RETRY_MS = 10_000;
/** the largest token answer read */
const MAX_ANSWER = 1024 * 1024;
/** tokens remembered for redaction (the current one and a few before it: streams still running may have used them) */
const REMEMBERED = 4;

export interface EntraCredentialOptions {
  /** e.g. https://login.microsoftonline.com (no tenant) */
  authorityHost: string;
  tenantId: string;
  clientId: string;
  clientSecret: string;
  scope?: string;
  /** ms the token endpoint may take to answer (default TOKEN_TIMEOUT_MS) */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** the clock (ms), for tests of the lifetime rules */
  now?: () => number;
}

interface Held {
  token: string;
  /** past this, the next request fetches a fresh token */
  refreshAt: number;
  /** past this, the token is not sent any more (a small margin before its real expiry) */
  usableUntil: number;
}

/** The token endpoint: the shared transport (timeouts, keep-alive, tracing) with Entra's refusals mapped. */
class TokenEndpoint extends Upstream {
  constructor(
    authorityHost: string,
    timeoutMs: number,
    connectTimeoutMs: number | undefined,
    private readonly clientSecret: string,
  ) {
    super({ baseUrl: authorityHost, timeoutMs, connectTimeoutMs, headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' } });
  }

  override statusError(status: number, body: string): EngineError {
    // Entra's error answer: {error: "invalid_client", error_description: "AADSTS7000215: Invalid client secret ...", error_codes: [7000215]}.
    // Only the error's name and its AADSTS number are said: the description names the app and the tenant
    let name: string | undefined;
    let aadsts: string | undefined;
    try {
      const j = JSON.parse(body) as { error?: unknown; error_codes?: unknown; error_description?: unknown };
      if (typeof j.error === 'string' && /^[a-z_]{1,64}$/.test(j.error)) name = j.error;
      const first = Array.isArray(j.error_codes) ? j.error_codes[0] : undefined;
      if (typeof first === 'number' && Number.isInteger(first)) aadsts = `AADSTS${first}`;
      else if (typeof j.error_description === 'string') aadsts = /^(AADSTS\d{1,9})\b/.exec(j.error_description)?.[1];
    } catch {
      name = parseErrorBody(body).code;
    }
    const what = [name, aadsts].filter(Boolean).join(', ');
    const detail = redactSecrets(what ? `HTTP ${status}, ${what}` : `HTTP ${status}`, [this.clientSecret]);
    if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
      return credentialError(`the token endpoint refused the client credentials (${detail}): check the tenant, the client id and the secret`, 'upstream_auth_failed', 502);
    }
    return credentialError(
      `the token endpoint failed (${detail})`,
      status === 408 || status === 504 ? 'upstream_timeout' : 'upstream_unavailable',
      status === 408 || status === 504 ? 504 : 502,
    );
  }
}

/** the errors made here (the transport's are reworded into one of these) */
const ours = new WeakSet<EngineError>();

function credentialError(why: string, code: string, status: number): EngineError {
  const e = new EngineError(`could not obtain an Entra ID token for Azure OpenAI: ${why}`, code, status, { retryable: true });
  ours.add(e);
  return e;
}

function aborted(): EngineError {
  return new EngineError('generation aborted', 'aborted', 499);
}

/** An Entra ID client-credentials token for Azure OpenAI, fetched on first use and kept until it is due. */
export class EntraCredential {
  private readonly endpoint: TokenEndpoint;
  private readonly path: string;
  private readonly form: string;
  private readonly host: string;
  private readonly now: () => number;
  private held: Held | undefined;
  private inflight: Promise<Held> | undefined;
  /** a refresh failed while the held token still served: none is tried before this */
  private retryAt = 0;
  /** the last tokens issued, newest first */
  private tokens: string[] = [];
  /** the client secret's forms and the last tokens issued, longest first */
  private secrets: string[];
  /** token calls made (for tests and the docs' claim that one call serves concurrent requests) */
  fetches = 0;

  constructor(readonly opts: EntraCredentialOptions) {
    this.now = opts.now ?? Date.now;
    this.endpoint = new TokenEndpoint(opts.authorityHost, opts.timeoutMs ?? TOKEN_TIMEOUT_MS, opts.connectTimeoutMs, opts.clientSecret);
    this.host = new URL(opts.authorityHost).host;
    this.path = `/${encodeURIComponent(opts.tenantId)}/oauth2/v2.0/token`;
    this.form = new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: opts.clientId,
      client_secret: opts.clientSecret,
      scope: opts.scope ?? COGNITIVE_SERVICES_SCOPE,
    }).toString();
    this.secrets = secretForms(opts.clientSecret);
  }

  /** The token to send now: the held one while it is not due, else a fresh one (one fetch for every waiter). */
  async token(signal?: AbortSignal): Promise<string> {
    if (signal?.aborted) throw aborted();
    const h = this.held;
    const now = this.now();
    if (h !== undefined && now < h.refreshAt) return h.token;
    // due, not expired, and a refresh failed moments ago: the old token serves until the retry
    if (h !== undefined && now < h.usableUntil && now < this.retryAt) return h.token;
    try {
      return (await raced(this.refresh(), signal)).token;
    } catch (e) {
      if (e instanceof EngineError && e.code === 'aborted') throw e;
      // the refresh failed: a token that has not expired still serves this request
      const still = this.held;
      if (still !== undefined && this.now() < still.usableUntil) return still.token;
      throw e;
    }
  }

  /** Azure refused this token (401): it is dropped unless a newer one replaced it already, so the next token() fetches. */
  refused(token: string): void {
    if (this.held?.token === token) {
      this.held = undefined;
      this.retryAt = 0;
    }
  }

  /** The text without the client secret or any token this credential issued. */
  redact(text: string): string {
    return redactSecrets(text, this.secrets);
  }

  close(): void {
    this.endpoint.close();
  }

  private refresh(): Promise<Held> {
    if (this.inflight !== undefined) return this.inflight;
    const p: Promise<Held> = this.fetch()
      .then(
        (held) => {
          this.held = held;
          this.retryAt = 0;
          this.remember(held.token);
          return held;
        },
        (e: unknown) => {
          this.retryAt = this.now() + REFRESH_RETRY_MS;
          throw e;
        },
      )
      .finally(() => {
        if (this.inflight === p) this.inflight = undefined;
      });
    this.inflight = p;
    // every waiter may have left (aborted): the failure is theirs, not an unhandled rejection
    p.catch(() => {});
    return p;
  }

  private async fetch(): Promise<Held> {
    this.fetches++;
    const start = this.now();
    let text: string;
    try {
      // no request's signal: the call is shared, one waiter leaving does not cut it for the others
      const call = await this.endpoint.post(this.path, this.form, undefined);
      try {
        text = await this.endpoint.readText(call, MAX_ANSWER);
      } catch (e) {
        call.destroy();
        throw this.endpoint.mapError(e, call);
      }
    } catch (e) {
      throw this.transportError(e);
    }
    let body: { access_token?: unknown; expires_in?: unknown };
    try {
      body = JSON.parse(text);
    } catch {
      throw credentialError(`the token endpoint's answer is not JSON`, 'upstream_error', 502);
    }
    const token = body?.access_token;
    // expires_in is a number in v2.0 answers, a string in v1.0 ones
    const life = typeof body?.expires_in === 'string' && /^\d+$/.test(body.expires_in) ? Number(body.expires_in) : body?.expires_in;
    if (typeof token !== 'string' || token.length === 0 || /[\s\u0000-\u001f\u007f]/.test(token) || typeof life !== 'number' || !Number.isFinite(life) || life <= 0) {
      throw credentialError("the token endpoint's answer has no access_token and expires_in", 'upstream_error', 502);
    }
    const lifeMs = life * 1000;
    // counted from when the call was sent: the token's clock started no earlier
    return {
      token,
      refreshAt: start + lifeMs - Math.min(5 * 60_000, lifeMs / 2),
      usableUntil: start + lifeMs - Math.min(30_000, lifeMs / 10),
    };
  }

  /** A transport failure of the token call as a credential error naming the endpoint's host (never the form). */
  private transportError(e: unknown): EngineError {
    if (e instanceof EngineError && ours.has(e)) return e;
    const m = e instanceof EngineError ? e : this.endpoint.mapError(e);
    const why = this.redact(m.message).replace(/^upstream /, '');
    return credentialError(`${this.host} ${why}`, m.status === 504 ? 'upstream_timeout' : 'upstream_unavailable', m.status === 504 ? 504 : 502);
  }

  private remember(token: string): void {
    if (this.tokens[0] === token) return;
    this.tokens = [token, ...this.tokens.filter((t) => t !== token)].slice(0, REMEMBERED);
    this.secrets = [...secretForms(this.opts.clientSecret), ...this.tokens.filter((t) => t.length >= 3)].sort((a, b) => b.length - a.length);
  }
}

/** the secret as it is and as the form encodes it */
function secretForms(secret: string): string[] {
  const out = new Set([secret, encodeURIComponent(secret), new URLSearchParams({ s: secret }).toString().slice(2)]);
  return [...out].filter((s) => s.length >= 3);
}

/** The promise, or the request's abort, whichever comes first (the promise goes on for its other waiters). */
function raced<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(aborted());
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

interface Shared {
  credential: EntraCredential;
  users: number;
}

const shared = new Map<string, Shared>();

/**
 * The credential of these options, shared by every engine that names the same one (authority, tenant, client,
 * secret, scope, timeouts): one token, one fetch at a time. `release` when the engine is done with it; the last
 * release closes it. The map's key holds a hash of the secret, not the secret.
 */
export function acquireCredential(opts: EntraCredentialOptions): { credential: EntraCredential; release: () => void } {
  const key = JSON.stringify([
    opts.authorityHost.replace(/\/+$/, ''),
    opts.tenantId,
    opts.clientId,
    createHash('sha256').update(opts.clientSecret).digest('base64'),
    opts.scope ?? COGNITIVE_SERVICES_SCOPE,
    opts.timeoutMs ?? TOKEN_TIMEOUT_MS,
    opts.connectTimeoutMs ?? null,
    opts.now === undefined,
  ]);
  let s = shared.get(key);
  if (s === undefined) {
    s = { credential: new EntraCredential(opts), users: 0 };
    // a credential with its own clock (a test's) is never shared
    if (opts.now === undefined) shared.set(key, s);
  }
  s.users++;
  const entry = s;
  let released = false;
  return {
    credential: entry.credential,
    release() {
      if (released) return;
      released = true;
      if (--entry.users > 0) return;
      if (shared.get(key) === entry) shared.delete(key);
      entry.credential.close();
    },
  };
}
