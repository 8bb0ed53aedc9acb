/**
 * The per-key rate limits count in fixed one-minute windows (src/platform/cluster/limits.ts: the window is
 * `Math.floor(now / 60_000)`). A test that counts requests against a limit must not straddle two windows: a
 * window that turns in the middle starts the count again at zero.
 */

/** Waits for the next minute when fewer than `needSeconds` are left in this one. */
export async function awayFromMinuteEdge(needSeconds = 8): Promise<void> {
  const s = (Date.now() % 60_000) / 1000;
  if (s > 60 - needSeconds) await new Promise<void>((r) => setTimeout(r, (60 - s) * 1000 + 100));
}
