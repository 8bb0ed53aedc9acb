import { EngineError } from '../types.js';

/**
 * The arguments of a tool call sent back to a provider that keeps a call's input as a JSON object (Anthropic,
 * Converse, Gemini): empty is `{}`; anything but an object is a 400 at `at` (the request's path to the call), naming
 * `whose` keeps it so (e.g. "Anthropic keeps a call's input as an object").
 */
export function toolArgsObject(args: string, at: string, whose: string): Record<string, unknown> {
  if (args.trim() === '') return {};
  let v: unknown;
  try {
    v = JSON.parse(args);
  } catch {
    v = undefined;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw new EngineError(`${at}: the arguments of a tool call sent back to this model must be a JSON object (${whose}).`, 'invalid_value', 400);
  }
  return v as Record<string, unknown>;
}
