/**
 * Waits for `p` to settle, either way, for at most `ms`: true when it did, false when the time ran out first (what a
 * close does with a step that may never end: a release held by a stuck job, a publish to a reconnecting feed). The
 * timer is cleared either way, so nothing is left to hold the process.
 */
export async function settledWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
