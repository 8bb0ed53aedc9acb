import { EngineError } from '../types.js';

/**
 * Every form in which Portico sends an upstream's credentials: the API key (raw, so `Bearer <key>` too), and
 * the user and password of a base_url with userinfo (raw, percent-decoded, `user:pass`, and the base64 of the
 * Basic header in its standard and URL-safe alphabets, with and without padding). An upstream that echoes its
 * request (many do in their errors) could otherwise hand any of them to a client.
 */
export function upstreamSecrets(baseUrl: string, apiKey?: string): string[] {
  const out = new Set<string>();
  const add = (s: string | undefined) => {
    // a credential of one or two characters would blank out half of every message; such a secret protects nothing anyway
    if (s && s.length >= 3) out.add(s);
  };
  add(apiKey);
  if (apiKey) add(encodeURIComponent(apiKey));
  try {
    const u = new URL(baseUrl);
    if (u.username || u.password) {
      const user = safeDecode(u.username);
      const pass = safeDecode(u.password);
      for (const s of [u.username, u.password, user, pass, `${u.username}:${u.password}`, `${user}:${pass}`]) add(s);
      const b64 = Buffer.from(`${user}:${pass}`).toString('base64');
      for (const s of [b64, b64.replace(/=+$/, ''), Buffer.from(`${user}:${pass}`).toString('base64url')]) add(s);
    }
  } catch {
    // not a URL: nothing in it to hide
  }
  // longest first, so a secret that contains another is replaced whole
  return [...out].sort((a, b) => b.length - a.length);
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Replaces every secret in a text with `***`. */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join('***');
  return out;
}

/**
 * The one boundary where an upstream's text becomes client-visible: every EngineError an upstream engine
 * throws (before or during a stream, from any method) leaves it with its message redacted. Engines of the
 * openai-compatible provider are wrapped in this when they are created, so no message path inside them can
 * leak a credential, whatever text the upstream sent.
 */
export function redactingEngine<T extends object>(engine: T, secrets: readonly string[]): T {
  if (secrets.length === 0) return engine;
  const clean = (e: unknown): unknown =>
    e instanceof EngineError
      ? new EngineError(redactSecrets(e.message, secrets), e.code, e.status, { retryable: e.retryable, retryAfterMs: e.retryAfterMs, upstreamStatus: e.upstreamStatus })
      : e;
  return new Proxy(engine, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      if (typeof v !== 'function') return v;
      return function (this: unknown, ...args: unknown[]) {
        let r: unknown;
        try {
          r = (v as (...a: unknown[]) => unknown).apply(target, args);
        } catch (e) {
          throw clean(e);
        }
        if (r instanceof Promise) return r.catch((e) => Promise.reject(clean(e)));
        if (r && typeof (r as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') return redactIterable(r as AsyncIterable<unknown>, clean);
        return r;
      };
    },
  });
}

async function* redactIterable<E>(it: AsyncIterable<E>, clean: (e: unknown) => unknown): AsyncGenerator<E> {
  try {
    yield* it;
  } catch (e) {
    throw clean(e);
  }
}
