/**
 * Embedded llama.cpp text engine (node-llama-cpp 3.x, prebuilt CPU binary, never builds or downloads).
 *
 * What callers (the responses service) should know:
 * - `createLlamaEngine({ path, contextSize?, parallel?, threads?, batchSize?, gpu?, maxSavedStates?,
 *   defaultTemperature?, eager? })` resolves once the model is loaded (eager, default). `contextWindow` is the
 *   per-sequence context size actually allocated.
 * - Tool calls: callIds are generated here ("call_" + 16 random url-safe chars), fresh for every call.
 *   tool_choice required / {type:'function'} force a call with a JSON grammar ({"name","arguments"}, or an array
 *   of those unless parallelToolCalls is false); 'auto' uses node-llama-cpp's native function calling in the
 *   model's own syntax; 'none' offers no tools. With a text.format grammar and tools on 'auto', the format wins.
 * - usage.inputTokens = tokens of the formatted prompt (countTokens gives the same number for the same messages
 *   and tools with tool_choice auto/none; a forced call adds protocol instructions); outputTokens = sampled tokens;
 *   cachedTokens = prompt tokens not evaluated again (prefix already in the sequence, or restored from the state
 *   saved under `saveKey` when a later request passes it as `cacheKey`); reasoningTokens when thinking was seen.
 * - Abort: while queued, the iterable throws an AbortError; once generation started, it stops and ends with
 *   `done` (finishReason 'stop') carrying the usage so far. A consumer that stops iterating also stops generation.
 * - Errors are EngineError: context_length_exceeded (400), invalid_json_schema (400), invalid_tool_choice (400),
 *   unsupported_input (400, image parts), model_load_failed (500), engine_error (500).
 */
export { createLlamaEngine, LlamaEngine, type LlamaEngineOptions } from './engine.js';
