/**
 * The shape limits of every JSON request body and WebSocket message (docs/security.md, "Limits"): how deep
 * values nest and how many values one body holds. They bound the work a single request can cause whatever
 * its fields are (unknown fields inside input items are ignored, but they are still parsed and copied).
 * Kept free of imports: the JSON worker thread (./json-worker.ts) runs it too.
 */

/** items of a Responses input array, messages of a Chat Completions request: at most this many (OpenAI documents no count) */
export const MAX_INPUT_ITEMS = 4096;
/** a text input: OpenAI's limit */
export const MAX_INPUT_CHARS = 10_485_760;

/** objects and arrays inside each other: at most this deep (the body itself is level 1) */
export const MAX_JSON_DEPTH = 64;
/** values (objects, arrays, strings, numbers, booleans, nulls) in one body: at most this many */
export const MAX_JSON_VALUES = 100_000;

/** A limit a body breaks; the message is made from it where it is answered (./json-body.ts, shapeError). */
export interface ShapeProblem {
  /** which limit: more than `limit` values, deeper than `limit` levels */
  rule: 'values' | 'depth';
  limit: number;
  /** where: the parameter (OpenAI notation, e.g. `tools[0].parameters`), its first 200 characters */
  param: string | null;
  /** the path was longer than `param` */
  cut?: boolean;
  detail: 'invalid_value' | 'array_above_max_length';
  /** a `__proto__` key, or a `constructor` with a `prototype` (refused as Fastify's own parser does) */
  poisoned?: boolean;
}

function pathOf(stack: ReadonlyArray<string | number>): string {
  let out = '';
  for (const k of stack) out += typeof k === 'number' ? `[${k}]` : out ? `.${k}` : k;
  return out;
}

/**
 * Walks a parsed value without recursion (a deep one cannot overflow the stack here) and returns the first
 * limit it breaks, or undefined. The path is rebuilt only on failure.
 */
export function checkJsonShape(root: unknown, maxDepth = MAX_JSON_DEPTH, maxValues = MAX_JSON_VALUES): ShapeProblem | undefined {
  if (root === null || typeof root !== 'object') return undefined;
  // a frame per open container: its keys (objects, null for arrays) and the next index; `under`: the key of each
  // open container but the root in its parent
  const containers: object[] = [root];
  const keys: Array<string[] | null> = [Array.isArray(root) ? null : Object.keys(root)];
  const next: number[] = [0];
  const under: Array<string | number> = [];
  let values = 1;
  while (containers.length) {
    const top = containers.length - 1;
    const c = containers[top]!;
    const k = keys[top]!;
    const i = next[top]!;
    const len = k ? k.length : (c as unknown[]).length;
    if (i >= len) {
      containers.pop();
      keys.pop();
      next.pop();
      under.pop();
      continue;
    }
    next[top] = i + 1;
    const key = k ? k[i]! : i;
    const v = k ? (c as Record<string, unknown>)[key as string] : (c as unknown[])[i];
    if (++values > maxValues) {
      const at = [...under, key].slice(0, 1);
      return { rule: 'values', limit: maxValues, param: pathOf(at), detail: 'array_above_max_length' };
    }
    if (k && (key === '__proto__' || (key === 'constructor' && v !== null && typeof v === 'object' && 'prototype' in v))) {
      return { rule: 'values', limit: maxValues, param: null, detail: 'invalid_value', poisoned: true };
    }
    if (v !== null && typeof v === 'object') {
      if (containers.length >= maxDepth) {
        const at = pathOf([...under, key]);
        return at.length > 200
          ? { rule: 'depth', limit: maxDepth, param: at.slice(0, 200), cut: true, detail: 'invalid_value' }
          : { rule: 'depth', limit: maxDepth, param: at, detail: 'invalid_value' };
      }
      under.push(key);
      containers.push(v);
      keys.push(Array.isArray(v) ? null : Object.keys(v));
      next.push(0);
    }
  }
  return undefined;
}
