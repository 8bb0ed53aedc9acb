import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';

/** The deployment's connect timeout (a model-file key every entry has, see src/models/spec.ts). */
const connectMs = (s: object): number | undefined => (s as { timeouts?: { connect_ms?: number } }).timeouts?.connect_ms;

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
  options: Type.Object(
    {
      base_url: Type.String({ pattern: '^https?://', description: "the upstream's /v1, e.g. http://127.0.0.1:11434/v1" }),
      api_key_env: Type.Optional(Type.String({ minLength: 1, description: 'the environment variable holding the upstream key' })),
      upstream_model: Type.Optional(Type.String({ minLength: 1, description: 'the name the upstream knows (default: name)' })),
      api: Type.Optional(Type.Union([Type.Literal('chat.completions'), Type.Literal('responses')], { description: 'text: the upstream API to speak' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'text: tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
      voices: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { description: 'speech: voices the upstream has besides the six standard ones' })),
    },
    { additionalProperties: false },
  ),
  check: (s) => {
    if (s.api !== undefined && s.type !== 'text') return `api applies to text models only (this one is ${s.type})`;
    if (s.voices !== undefined && s.type !== 'speech') return `voices applies to speech models only (this one is ${s.type})`;
    return undefined;
  },
  load: { text: textCode, speech: audioCode, transcription: audioCode, embeddings: embeddingsCode },
  create: {
    async text(s, ctx) {
      const { createOpenAICompatibleEngine } = await textCode();
      const apiKey = s.api_key_env ? ctx.env[s.api_key_env] : undefined;
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
      const apiKey = s.api_key_env ? ctx.env[s.api_key_env] : undefined;
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
      const apiKey = s.api_key_env ? ctx.env[s.api_key_env] : undefined;
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
      const apiKey = s.api_key_env ? ctx.env[s.api_key_env] : undefined;
      return redactingEngine(
        createOpenAICompatibleEmbeddingsEngine({ baseUrl: s.base_url, apiKey, timeoutMs: s.timeout_ms, connectTimeoutMs: connectMs(s) }),
        upstreamSecrets(s.base_url, apiKey),
      );
    },
  },
});
