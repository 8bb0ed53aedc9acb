/** Latency statistics in milliseconds. */
export interface Latency {
  n: number;
  p50: number;
  p99: number;
  mean: number;
}

export function latency(samplesMs: number[]): Latency {
  const s = [...samplesMs].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
  return { n: s.length, p50: at(0.5), p99: at(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

/** Runs `f` `n` times one after another and returns each call's duration (ms). */
export async function timeEach(n: number, f: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await f(i);
    out.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return out;
}

export const fmt = (ms: number) => (ms < 1 ? ms.toFixed(3) : ms.toFixed(2));
