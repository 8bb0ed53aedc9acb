/**
 * Runs `f` with JSON.stringify watched and gives the length of the longest text one call made: a large value
 * made in slices (src/platform/json-text.ts) never has its whole text made by one call, which would hold the
 * event loop for all of it.
 */
export async function longestStringify<T>(f: () => Promise<T>): Promise<{ result: T; longest: number }> {
  const original = JSON.stringify;
  let longest = 0;
  JSON.stringify = function (this: unknown, ...args: Parameters<typeof JSON.stringify>) {
    const out = original.apply(this, args);
    if (typeof out === 'string') longest = Math.max(longest, out.length);
    return out;
  } as typeof JSON.stringify;
  try {
    return { result: await f(), longest };
  } finally {
    JSON.stringify = original;
  }
}
