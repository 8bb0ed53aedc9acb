/**
 * What the providers that call an upstream over HTTP (openai-compatible, anthropic) check and read of their model
 * entries alike: the base_url, the variable that holds the key (or the key stored through the admin API), and the
 * connect timeout of a deployment.
 */
import { storedSecretOf, type ProviderContext } from '../provider.js';
import { EngineError } from '../types.js';

/** The longest a connection may take to open when the deployment does not say (undici's own default). */
export const CONNECT_CAP_MS = 10_000;

/**
 * The deployment's connect timeout (`timeouts` is a model-file key every entry has, see src/models/spec.ts): its
 * `connect_ms`, else the smallest of `timeout_ms`, `first_byte_ms` and 10 s: a connect never outlasts the try it
 * is part of.
 */
export function connectMs(s: { timeout_ms?: number }): number {
  const t = (s as { timeouts?: { connect_ms?: number; first_byte_ms?: number } }).timeouts;
  return t?.connect_ms ?? Math.min(CONNECT_CAP_MS, s.timeout_ms ?? Infinity, t?.first_byte_ms ?? Infinity);
}

/**
 * Why a base_url cannot make an upstream, or undefined when it can: it must parse as a URL (WHATWG, as undici
 * reads it), with a host, a port in 1-65535 when one is given, no whitespace anywhere, and no query or fragment
 * (the API path is appended to its path; a query would be dropped without a word). The message never repeats
 * the URL: it may carry credentials (user:password@).
 */
export function baseUrlProblem(url: string): string | undefined {
  if (/\s/.test(url)) return "'base_url' contains whitespace (a space, tab or line break): remove it, or write a space in a path as %20";
  const scheme = /^(https?):\/\//.exec(url);
  if (!scheme) return "'base_url' must be an http:// or https:// URL";
  const rest = url.slice(scheme[0].length);
  const authority = rest.split(/[/?#]/, 1)[0] ?? '';
  const hostPort = authority.slice(authority.lastIndexOf('@') + 1);
  const port = /^(?:\[[^\]]*\]|[^:]*):(\d+)$/.exec(hostPort)?.[1];
  if (hostPort === '' || hostPort.startsWith(':')) return `'base_url' has no host: write it as ${scheme[1]}://host[:port]/v1`;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return `'base_url' has the port ${port}, outside 1-65535`;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `'base_url' is not a valid URL (host or port malformed): write it as ${scheme[1]}://host[:port]/v1`;
  }
  if (u.search || u.hash || url.includes('?') || url.includes('#')) return "'base_url' must not carry a query (?...) or a fragment (#...): Portico appends the API path to it";
  return undefined;
}

/** An environment variable's name as shells write it. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why `api_key_env` cannot give a key, or undefined (`env`: the environment to read, when serving). */
export function apiKeyEnvProblem(name: string, env: Readonly<Record<string, string | undefined>> | undefined): string | undefined {
  // the value may be the key itself, pasted in the wrong place: it is never repeated
  if (!ENV_NAME.test(name)) {
    return name.startsWith('$') && ENV_NAME.test(name.slice(1))
      ? `'api_key_env' takes the variable's name without '$': api_key_env: ${name.slice(1)}`
      : "'api_key_env' must be the name of an environment variable (letters, digits and _), not the key itself";
  }
  if (!env) return undefined;
  const v = env[name];
  if (v === undefined) return `'api_key_env' names ${name}, which is not set in Portico's environment: set it, or remove api_key_env for an upstream that needs no key`;
  if (v.trim() === '') return `'api_key_env' names ${name}, which is set but empty: give it the upstream's key`;
  return undefined;
}

/**
 * The upstream key of an entry: the one typed into the admin API (stored encrypted, handed over decrypted on the
 * entry: engines/provider.ts, STORED_SECRET), else the variable `api_key_env` names. A stored key that could not
 * be decrypted makes no engine: nothing is sent upstream without it.
 */
export function apiKeyOf(s: { name: string; api_key_env?: string }, ctx: ProviderContext, defaultEnv?: string): string | undefined {
  const stored = storedSecretOf(s);
  if (stored?.error !== undefined) throw new EngineError(stored.error, 'engine_unavailable', 503);
  if (stored?.apiKey !== undefined) return stored.apiKey;
  const env = s.api_key_env ?? defaultEnv;
  return env ? ctx.env[env] || undefined : undefined;
}
