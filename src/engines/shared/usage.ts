/** The prompt-cache counts of an engine's usage, as the decoders and the forwarded Messages read them. */
import type { Usage } from '../types.js';

export type CacheCounts = Pick<Usage, 'cachedTokens' | 'cacheWriteTokens' | 'cacheWrite1hTokens'>;

/** the cache counts of a usage: reads, writes, and the writes' one-hour part (never more than the writes) */
export function cacheCounts(read: number | undefined, write: number | undefined, write1h: number | undefined): CacheCounts {
  const out: CacheCounts = {};
  if (read !== undefined) out.cachedTokens = read;
  if (write !== undefined) {
    out.cacheWriteTokens = write;
    if (write1h !== undefined && write1h > 0) out.cacheWrite1hTokens = Math.min(write1h, write);
  }
  return out;
}

/** the cache counts of `from`, when it has them, copied onto `to` */
export function copyCacheCounts(from: CacheCounts | undefined, to: CacheCounts): void {
  if (from?.cachedTokens !== undefined) to.cachedTokens = from.cachedTokens;
  if (from?.cacheWriteTokens !== undefined) to.cacheWriteTokens = from.cacheWriteTokens;
  if (from?.cacheWrite1hTokens !== undefined) to.cacheWrite1hTokens = from.cacheWrite1hTokens;
}
