import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { apiKeyEnvProblem, apiKeyOf, baseUrlProblem, connectMs } from '../shared/upstream.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';

export { baseUrlProblem, connectMs, CONNECT_CAP_MS } from '../shared/upstream.js';

/**
 * The engines' code, undici's included: loaded at start (`load`), as loading it in the first request held the
 * event loop ~90 ms (docs/performance.md, "One large request and the rest of the instance").
 */
const textCode = () => import('./index.js');
const audioCode = () => import('./audio.js');
const embeddingsCode = () => import('./embeddings.js');
const realtimeCode = () => import('./realtime.js');

/**
 * The output cap's field when the model file does not say (max_tokens_field): max_completion_tokens for OpenAI's own
 * API (its reasoning models, o-series and gpt-5, refuse max_tokens; every chat model takes max_completion_tokens),
 * max_tokens for the rest (open servers know it, some not max_completion_tokens).
 */
export function defaultOutputCap(baseUrl: string): 'max_tokens' | 'max_completion_tokens' {
  try {
    return new URL(baseUrl).hostname === 'api.openai.com' ? 'max_completion_tokens' : 'max_tokens';
  } catch {
    return 'max_tokens';
  }
}

/** Any OpenAI-compatible server (vLLM, Ollama, llama.cpp server, LocalAI, speaches, OpenAI itself). */
export const openaiCompatible = defineProvider({
  name: 'openai-compatible',
  summary: 'any OpenAI-compatible server (vLLM, Ollama, llama.cpp server, LocalAI, speaches, OpenAI)',
  serves: ['text', 'speech', 'transcription', 'embeddings', 'realtime'],
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
      max_tokens_field: Type.Optional(
        Type.Union([Type.Literal('max_tokens'), Type.Literal('max_completion_tokens')], {
          description: 'text: the request field of the output cap (default max_tokens; max_completion_tokens for api.openai.com, whose reasoning models refuse max_tokens)',
        }),
      ),
    },
    { additionalProperties: false },
  ),
  check: (s, env) => {
    if (s.api !== undefined && s.type !== 'text') return `api applies to text models only (this one is ${s.type})`;
    if (s.voices !== undefined && s.type !== 'speech') return `voices applies to speech models only (this one is ${s.type})`;
    // only text engines are given a context window (embeddings and audio upstreams know their own limits)
    if (s.context_window !== undefined && s.type !== 'text') return `context_window applies to text models only (this one is ${s.type})`;
    if (s.max_tokens_field !== undefined && s.type !== 'text') return `max_tokens_field applies to text models only (this one is ${s.type})`;
    return baseUrlProblem(s.base_url) ?? (s.api_key_env !== undefined ? apiKeyEnvProblem(s.api_key_env, env) : undefined);
  },
  // the text engine has chatCompletions exactly when it speaks Chat Completions to the upstream (./index.ts)
  forwardsChatCompletions: (s) => s.type === 'text' && (s.api ?? 'chat.completions') === 'chat.completions',
  remote: true,
  storesKey: true,
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
          outputCap: s.max_tokens_field ?? defaultOutputCap(s.base_url),
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
    // an upstream realtime server (OpenAI, speaches, another Portico): a WebSocket per session
    async realtime(s, ctx) {
      const { createRealtimeEngine } = await realtimeCode();
      const t = (s as { timeouts?: { first_byte_ms?: number } }).timeouts;
      return createRealtimeEngine({ baseUrl: s.base_url, apiKey: apiKeyOf(s, ctx), connectMs: connectMs(s), firstEventMs: t?.first_byte_ms });
    },
  },
});
