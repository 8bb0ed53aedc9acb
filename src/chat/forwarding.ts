/**
 * Which fields of a Chat Completions request reach an upstream as the client sent them. A top-level field that is
 * not a parameter of OpenAI's API (`top_k`, `min_p`, `repetition_penalty`, `chat_template_kwargs`: what vLLM,
 * SGLang, llama.cpp server and Ollama take) is forwarded to an upstream that speaks Chat Completions, whose to
 * accept or refuse it is. Where Portico generates the answer itself (the embedded llama engine, an upstream on the
 * Responses API) nothing would read it, so it is refused as unsupported, never silently dropped.
 *
 * A model with several deployments, or with fallbacks, may be served by any of them, and which one is only known
 * once a try is made. Such a field is accepted only when every deployment of the model and of every model it may
 * fall back to forwards; otherwise it is refused before anything runs, whichever deployment would have served. So
 * one request is accepted or refused for the model as configured, not by the luck of the draw.
 */
import { forwardsChatCompletions } from '../engines/providers.js';
import { servingModels, type ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
import { ChatCompletionBody } from './schemas.js';

/** the parameters of OpenAI's Chat Completions API that Portico knows (and validates) */
const KNOWN = new Set(Object.keys(ChatCompletionBody.properties));

/** The top-level fields of a request that are not OpenAI parameters, in the order the client sent them. */
export function unknownFields(body: object): string[] {
  return Object.keys(body).filter((k) => !KNOWN.has(k));
}

/**
 * The first deployment that may serve a request for `spec` and does not forward Chat Completions as sent (it
 * generates the answer), with its model; none when every one forwards.
 */
export function generatingDeployment(spec: ModelSpec, models: ModelRegistry): { model: string; deployment: string } | undefined {
  for (const m of servingModels(spec, models)) {
    const d = (m.deployments ?? [m]).find((x) => !forwardsChatCompletions(x));
    if (d) return { model: m.name, deployment: 'id' in d && typeof d.id === 'string' ? d.id : d.name };
  }
  return undefined;
}
