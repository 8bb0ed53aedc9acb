/**
 * Runs `f` with JSON.stringify watched and gives the length of the longest text one call made: a large value
 * made in slices (src/platform/json-text.ts) never has its whole text made by one call, which would hold the
 * event loop for all of it; and the characters of all calls, which count a text made in slices whole (a text
 * made in another thread is not counted: this thread's JSON.stringify only is watched).
 */
export async function longestStringify<T>(f: () => Promise<T>): Promise<{ result: T; longest: number; total: number }> {
  const original = JSON.stringify;
  let longest = 0;
  /** the characters of all calls: a text made in slices on this thread is counted whole */
  let total = 0;
  JSON.stringify = function (this: unknown, ...args: Parameters<typeof JSON.stringify>) {
    const out = original.apply(this, args);
    if (typeof out === 'string') {
      longest = Math.max(longest, out.length);
      total += out.length;
    }
    return out;
  } as typeof JSON.stringify;
  try {
    return { result: await f(), longest, total };
  } finally {
    JSON.stringify = original;
  }
}
