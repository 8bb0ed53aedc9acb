import { Type } from 'typebox';
import { defineProvider, storedSecretOf, type ProviderContext } from '../provider.js';
import { EngineError } from '../types.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';

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
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why `api_key_env` cannot give a key, or undefined (`env`: the environment to read, when serving). */
function apiKeyEnvProblem(name: string, env: Readonly<Record<string, string | undefined>> | undefined): string | undefined {
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
function apiKeyOf(s: { name: string; api_key_env?: string }, ctx: ProviderContext): string | undefined {
  const stored = storedSecretOf(s);
  if (stored?.error !== undefined) throw new EngineError(stored.error, 'engine_unavailable', 503);
  if (stored?.apiKey !== undefined) return stored.apiKey;
  return s.api_key_env ? ctx.env[s.api_key_env] : undefined;
}

/**
 * The engines' code, undici's included: loaded at start (`load`), as loading it in the first request held the
 * event loop ~90 ms (docs/performance.md, "One large request and the rest of the instance").
 */
const textCode = () => import('./index.js');
const audioCode = () => import('./audio.js');
const embeddingsCode = () => import('./embeddings.js');

/** Any OpenAI-compatible server (vLLM, Ollama, llama.cpp server, LocalAI, speaches, OpenAI itself). */
export const openaiCompatible = defineProvider({
  name: 'openai-compatible',
  summary: 'any OpenAI-compatible server (vLLM, Ollama, llama.cpp server, LocalAI, speaches, OpenAI)',
  serves: ['text', 'speech', 'transcription', 'embeddings'],
  probes: ['text', 'embeddings'],
  options: Type.Object(
    {
      // checked by baseUrlProblem (check, below): its messages say what is wrong, where a pattern could only say "invalid"
      base_url: Type.String({ minLength: 1, description: "the upstream's /v1, e.g. http://127.0.0.1:11434/v1" }),
      api_key_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding the upstream key' })),
      upstream_model: Type.Optional(Type.String({ minLength: 1, description: 'the name the upstream knows (default: name)' })),
      api: Type.Optional(Type.Union([Type.Literal('chat.completions'), Type.Literal('responses')], { description: 'text: the upstream API to speak' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'text: tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
      voices: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { description: 'speech: voices the upstream has besides the six standard ones' })),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => {
    if (s.api !== undefined && s.type !== 'text') return `api applies to text models only (this one is ${s.type})`;
    if (s.voices !== undefined && s.type !== 'speech') return `voices applies to speech models only (this one is ${s.type})`;
    // only text engines are given a context window (embeddings and audio upstreams know their own limits)
    if (s.context_window !== undefined && s.type !== 'text') return `context_window applies to text models only (this one is ${s.type})`;
    return baseUrlProblem(s.base_url) ?? (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined);
  },
  // the text engine has chatCompletions exactly when it speaks Chat Completions to the upstream (./index.ts)
  forwardsChatCompletions: (s) => s.type === 'text' && (s.api ?? 'chat.completions') === 'chat.completions',
  remote: true,
  load: { text: textCode, speech: audioCode, transcription: audioCode, embeddings: embeddingsCode },
  create: {
    async text(s, ctx) {
      const { createOpenAICompatibleEngine } = await textCode();
      const apiKey = apiKeyOf(s, ctx);
      return redactingEngine(
        createOpenAICompatibleEngine({
          baseUrl: s.base_url,
          apiKey,
          api: s.api ?? 'chat.completions',
          contextWindow: s.context_window,
          timeoutMs: s.timeout_ms,
          connectTimeoutMs: connectMs(s),
        }),
        upstreamSecrets(s.base_url, apiKey),
      );
    },
    async speech(s, ctx) {
      const { createOpenAICompatibleSpeechEngine, OPENAI_VOICES } = await audioCode();
      const apiKey = apiKeyOf(s, ctx);
      return redactingEngine(
        createOpenAICompatibleSpeechEngine({
          baseUrl: s.base_url,
          apiKey,
          upstreamModel: s.upstream_model ?? s.name,
          timeoutMs: s.timeout_ms,
          voices: s.voices ? [...OPENAI_VOICES, ...s.voices] : undefined,
        }),
        upstreamSecrets(s.base_url, apiKey),
      );
    },
    async transcription(s, ctx) {
      const { createOpenAICompatibleTranscriptionEngine } = await audioCode();
      const apiKey = apiKeyOf(s, ctx);
      return redactingEngine(
        createOpenAICompatibleTranscriptionEngine({
          baseUrl: s.base_url,
          apiKey,
          upstreamModel: s.upstream_model ?? s.name,
          timeoutMs: s.timeout_ms,
        }),
        upstreamSecrets(s.base_url, apiKey),
      );
    },
    async embeddings(s, ctx) {
      const { createOpenAICompatibleEmbeddingsEngine } = await embeddingsCode();
      const apiKey = apiKeyOf(s, ctx);
      return redactingEngine(
        createOpenAICompatibleEmbeddingsEngine({ baseUrl: s.base_url, apiKey, timeoutMs: s.timeout_ms, connectTimeoutMs: connectMs(s) }),
        upstreamSecrets(s.base_url, apiKey),
      );
    },
  },
});
