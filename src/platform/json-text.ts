/**
 * Large JSON texts made without holding the event loop. JSON.stringify of the largest value a request can bring
 * (16 MiB: an upstream request of 4096 messages, the stored input items of a response) is one call of 50-150 ms,
 * and encoding the text to UTF-8 as much again: every other request of the instance (/healthz included) waits
 * that long. `jsonUtf8` makes the same text in slices of about a mebibyte, encoded as it goes, with a turn of
 * the event loop between slices. Small values keep JSON.stringify: `largeJson` tells them apart by a walk that
 * stops as soon as the value is known to be large, so a small value costs a few hundred nanoseconds more.
 */
import { largeWorkDone } from './reclaim.js';

/** a value whose JSON text may reach this many characters is made in slices */
export const LARGE_JSON_CHARS = 256 * 1024;
/** the characters made between two turns of the event loop (2-5 ms) */
export const SLICE_CHARS = 512 * 1024;
/** values visited between two turns of the event loop, however short their text */
const SLICE_VALUES = 20_000;

export type JsonReplacer = (this: unknown, key: string, value: unknown) => unknown;

/**
 * Whether the JSON text of `value` may reach `chars` characters: the length of its strings and keys, plus two per
 * value. Stops at the first value past the bound; never throws.
 */
export function largeJson(value: unknown, chars = LARGE_JSON_CHARS): boolean {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    n += 2;
    if (typeof v === 'string') n += v.length;
    else if (v !== null && typeof v === 'object') {
      if (Array.isArray(v)) for (let i = 0; i < v.length; i++) stack.push(v[i]);
      else
        for (const k in v) {
          if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
          n += k.length;
          stack.push((v as Record<string, unknown>)[k]);
        }
    }
    if (n >= chars) return true;
  }
  return false;
}

/**
 * The UTF-8 bytes of a JSON text in one Buffer of its own memory (it can be moved to a thread), after `offset`
 * bytes of headroom a caller asked for (jsonb's version byte).
 */
export class JsonBytes {
  constructor(
    /** the headroom, then the text */
    readonly buffer: Buffer,
    readonly offset: number,
  ) {}

  get byteLength(): number {
    return this.buffer.length - this.offset;
  }

  /** the text's bytes (a view, no copy) */
  get bytes(): Buffer {
    return this.buffer.subarray(this.offset);
  }

  text(): string {
    return this.buffer.toString('utf8', this.offset);
  }
}

const turn = () => new Promise<void>((r) => setImmediate(r));

/** what JSON.stringify leaves out (after toJSON and the replacer): undefined, functions, symbols */
const SKIP = Symbol('skip');

/** an open object or array, or a string longer than a slice being written */
interface Frame {
  holder: object | string;
  /** an object's keys; null for an array or a string */
  keys: string[] | null;
  /** the next index (of keys, elements or characters) */
  i: number;
  length: number;
  first: boolean;
}

/** whether every element is a number (primitive: no toJSON is asked of it, so JSON.stringify of the array is the text) */
function numbersOnly(a: unknown[]): boolean {
  if (a.length === 0) return false;
  for (let i = 0; i < a.length; i++) if (typeof a[i] !== 'number') return false;
  return true;
}

/** The text of one value, made a slice at a time (see jsonUtf8). */
class Slicer {
  /** the text so far, a slice per string */
  readonly slices: string[] = [];
  bytes = 0;
  private parts: string[] = [];
  private pending = 0;
  private visited = 0;
  private readonly stack: Frame[] = [];
  private readonly open = new Set<object>();

  constructor(private readonly replacer: JsonReplacer | undefined) {}

  /** false when JSON.stringify would give undefined */
  start(value: unknown): boolean {
    const root = this.resolve({ '': value }, '', value);
    if (root === SKIP) return false;
    this.emit(root);
    return true;
  }

  /** writes until a slice is full or the text is done; true when done */
  step(): boolean {
    const stack = this.stack;
    this.visited = 0;
    while (stack.length) {
      if (this.pending >= SLICE_CHARS || this.visited >= SLICE_VALUES) break;
      const f = stack[stack.length - 1]!;
      if (typeof f.holder === 'string') {
        this.stringSlice(f, f.holder);
        continue;
      }
      if (f.i >= f.length) {
        this.out(f.keys ? '}' : ']');
        this.open.delete(f.holder);
        stack.pop();
        continue;
      }
      const i = f.i++;
      if (f.keys) {
        const key = f.keys[i]!;
        const v = this.resolve(f.holder, key, (f.holder as Record<string, unknown>)[key]);
        if (v === SKIP) continue;
        this.out((f.first ? '' : ',') + JSON.stringify(key) + ':');
        f.first = false;
        this.emit(v);
      } else {
        const v = this.resolve(f.holder, String(i), (f.holder as unknown[])[i]);
        if (!f.first) this.out(',');
        f.first = false;
        if (v === SKIP) this.out('null');
        else this.emit(v);
      }
    }
    this.flush();
    return stack.length === 0;
  }

  private out(s: string) {
    this.parts.push(s);
    this.pending += s.length;
  }

  private flush() {
    if (this.parts.length === 0) return;
    const slice = this.parts.length === 1 ? this.parts[0]! : this.parts.join('');
    this.slices.push(slice);
    this.bytes += Buffer.byteLength(slice, 'utf8');
    this.parts = [];
    this.pending = 0;
  }

  private resolve(holder: unknown, key: string, v: unknown): unknown {
    if (v !== null && (typeof v === 'object' || typeof v === 'bigint') && typeof (v as { toJSON?: unknown }).toJSON === 'function') {
      v = (v as { toJSON(k: string): unknown }).toJSON(key);
    }
    if (this.replacer) v = this.replacer.call(holder, key, v);
    if (v === undefined || typeof v === 'function' || typeof v === 'symbol') return SKIP;
    return v;
  }

  /** a resolved value: a leaf written at once (a long string opened as a frame), a container opened */
  private emit(v: unknown) {
    this.visited++;
    if (v === null || typeof v !== 'object' || v instanceof Number || v instanceof String || v instanceof Boolean || v instanceof BigInt) {
      if (typeof v === 'string' && v.length > SLICE_CHARS) {
        this.out('"');
        this.stack.push({ holder: v, keys: null, i: 0, length: v.length, first: true });
      } else this.out(JSON.stringify(v));
      return;
    }
    // an array of numbers (an embedding's vector: thousands of them) in one call: its text is the same
    if (!this.replacer && Array.isArray(v) && v.length <= SLICE_VALUES && numbersOnly(v)) {
      this.visited += v.length;
      this.out(JSON.stringify(v));
      return;
    }
    if (this.open.has(v)) throw new TypeError('Converting circular structure to JSON');
    this.open.add(v);
    const keys = Array.isArray(v) ? null : Object.keys(v);
    this.out(keys ? '{' : '[');
    this.stack.push({ holder: v, keys, i: 0, length: keys ? keys.length : (v as unknown[]).length, first: true });
  }

  /** the next piece of a long string: never between the halves of a surrogate pair, each would be escaped alone */
  private stringSlice(f: Frame, s: string) {
    if (f.i >= f.length) {
      this.out('"');
      this.stack.pop();
      return;
    }
    let end = Math.min(f.i + SLICE_CHARS, f.length);
    const last = s.charCodeAt(end - 1);
    if (end < f.length && last >= 0xd800 && last <= 0xdbff) end--;
    this.out(JSON.stringify(s.slice(f.i, end)).slice(1, -1));
    f.i = end;
  }
}

/**
 * The UTF-8 bytes of `JSON.stringify(value, replacer)` (the same text: toJSON, the replacer called with the
 * holder as `this`, undefined, functions and symbols left out of objects and null in arrays, boxed primitives,
 * a cycle refused with a TypeError), made in slices of about SLICE_CHARS characters with a turn of the event
 * loop between them, then written into one Buffer (after `headroom` bytes) a few slices per turn: the Buffer is
 * allocated once, at its size, and filled as the pages are touched. A string longer than a slice is itself cut.
 * Undefined when JSON.stringify would give undefined. No gap (indentation) and no array replacer.
 */
export async function jsonUtf8(value: unknown, replacer?: JsonReplacer, headroom = 0): Promise<JsonBytes | undefined> {
  const s = new Slicer(replacer);
  if (!s.start(value)) return undefined;
  // the first slice too after a turn: the caller has usually just done work of its own in this one
  do await turn();
  while (!s.step());
  const out = Buffer.allocUnsafeSlow(headroom + s.bytes);
  let at = headroom;
  let written = 0;
  for (const slice of s.slices) {
    if (written >= 2 * SLICE_CHARS) {
      await turn();
      written = 0;
    }
    const n = out.write(slice, at, 'utf8');
    at += n;
    written += n;
  }
  // a large value made into JSON (a stored response's items, a long chain sent upstream): large work (reclaim.ts)
  largeWorkDone(s.bytes);
  return new JsonBytes(out, headroom);
}
