/**
 * Resolves once `isIdle()` holds, checking every `everyMs`: how an engine whose deployment a reload retired waits
 * for its work in flight before it closes (TextEngine.retire). Only a retiring engine polls; the request path pays
 * nothing.
 */
export function whenIdle(isIdle: () => boolean, everyMs = 50): Promise<void> {
  if (isIdle()) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setInterval(() => {
      if (!isIdle()) return;
      clearInterval(t);
      resolve();
    }, everyMs);
    // a retiring engine never holds the process open (shutdown closes it anyway)
    t.unref();
  });
}
