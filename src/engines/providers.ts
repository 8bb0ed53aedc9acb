/**
 * Every provider Portico has, in one list. A new provider is a folder under src/engines with a provider.ts,
 * and one line here.
 */
import type { Static } from 'typebox';
import type { Provider } from './provider.js';
import type { EngineSpec } from './registry.js';
import { openaiCompatible } from './openai-compatible/provider.js';
import { llama } from './llama/provider.js';
import { flite } from './flite/provider.js';
import { espeak } from './espeak/provider.js';
import { pocketsphinx } from './pocketsphinx/provider.js';
import { whisper } from './whisper/provider.js';
import { piper } from './piper/provider.js';
import { anthropic } from './anthropic/provider.js';
import { azureOpenAI } from './azure-openai/provider.js';
import { bedrock } from './bedrock/provider.js';
import { gemini } from './gemini/provider.js';
import { pipeline } from './pipeline/provider.js';

export const PROVIDERS: ReadonlyMap<string, Provider> = new Map(
  ([openaiCompatible, llama, flite, espeak, pocketsphinx, whisper, piper, anthropic, azureOpenAI, bedrock, gemini, pipeline] as Provider[]).map((p) => [p.name, p]),
);

/** Every provider's own model-file keys, each optional: what a feature may read of any model entry. */
export type AnyProviderOptions = Partial<
  Static<typeof openaiCompatible.options> &
    Static<typeof llama.options> &
    Static<typeof flite.options> &
    Static<typeof espeak.options> &
    Static<typeof pocketsphinx.options> &
    Static<typeof whisper.options> &
    Static<typeof piper.options> &
    Static<typeof anthropic.options> &
    Static<typeof azureOpenAI.options> &
    Static<typeof bedrock.options> &
    Static<typeof gemini.options> &
    Static<typeof pipeline.options>
>;

/**
 * Whether the text engine of this entry (a model, or one deployment of it) forwards Chat Completions as the client
 * sent them (Provider.forwardsChatCompletions), without making the engine.
 */
export function forwardsChatCompletions(spec: EngineSpec): boolean {
  // the spec was checked against the provider's options when the model file was read
  const p = PROVIDERS.get(spec.provider) as { forwardsChatCompletions?(s: EngineSpec): boolean } | undefined;
  return p?.forwardsChatCompletions?.(spec) ?? false;
}

/**
 * Whether the text engine of this entry forwards Anthropic's Messages API as the client sent it
 * (Provider.forwardsMessages), without making the engine.
 */
export function forwardsMessages(spec: EngineSpec): boolean {
  const p = PROVIDERS.get(spec.provider) as { forwardsMessages?(s: EngineSpec): boolean } | undefined;
  return p?.forwardsMessages?.(spec) ?? false;
}
