/**
 * Crude voice fingerprints for the speech tests, written independently of src/: the level of a piece of speech
 * (RMS with leading and trailing silence trimmed, as docs/api.md defines it), the median pitch of voiced frames, and the long-term
 * average spectrum (LTAS) in log-spaced bands, normalized so the level does not count.
 */

export function concatInt16(parts: readonly Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

export function rms(x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return Math.sqrt(s / Math.max(1, x.length));
}

/** RMS in dBFS of the samples between the first and last 10 ms window within 40 dB of the loudest one (and above -70 dBFS). */
export function trimmedLevelDb(x: Int16Array, rate: number): number {
  const w = Math.round(rate / 100);
  let max = 0;
  for (let i = 0; i < x.length; i += w) max = Math.max(max, rms(x.subarray(i, i + w)));
  const floor = Math.max(max / 100, 32768 * Math.pow(10, -70 / 20));
  const loud = (i: number) => rms(x.subarray(i, i + w)) > floor;
  let a = 0;
  while (a < x.length && !loud(a)) a += w;
  let b = Math.floor((x.length - 1) / w) * w;
  while (b > a && !loud(b)) b -= w;
  if (a >= x.length) return -Infinity;
  return 20 * Math.log10(rms(x.subarray(a, Math.min(x.length, b + w))) / 32768);
}

/** Median F0 of voiced frames (normalized autocorrelation over 40 ms frames). */
export function medianF0(x: Int16Array, rate: number): number {
  const n = Math.round(rate * 0.04);
  const hop = Math.round(rate * 0.01);
  const overall = rms(x);
  const f0s: number[] = [];
  for (let s = 0; s + n <= x.length; s += hop) {
    let e = 0;
    for (let i = 0; i < n; i++) e += x[s + i] * x[s + i];
    if (Math.sqrt(e / n) < overall * 0.5) continue;
    let best = 0;
    let bestLag = 0;
    for (let lag = Math.floor(rate / 450); lag <= Math.ceil(rate / 60); lag++) {
      let c = 0;
      for (let i = 0; i + lag < n; i++) c += x[s + i] * x[s + i + lag];
      c /= e;
      if (c > best) {
        best = c;
        bestLag = lag;
      }
    }
    if (best > 0.6) f0s.push(rate / bestLag);
  }
  f0s.sort((a, b) => a - b);
  return f0s[Math.floor(f0s.length / 2)] ?? 0;
}

function fft(re: Float64Array, im: Float64Array): void {
  const n = re.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      [re[i], re[j]] = [re[j], re[i]];
      [im[i], im[j]] = [im[j], im[i]];
    }
  }
  for (let len = 2; len <= n; len <<= 1) {
    const ang = (-2 * Math.PI) / len;
    for (let i = 0; i < n; i += len) {
      for (let k = 0; k < len / 2; k++) {
        const c = Math.cos(ang * k);
        const s = Math.sin(ang * k);
        const a = i + k;
        const b = a + len / 2;
        const xr = re[b] * c - im[b] * s;
        const xi = re[b] * s + im[b] * c;
        re[b] = re[a] - xr;
        im[b] = im[a] - xi;
        re[a] += xr;
        im[a] += xi;
      }
    }
  }
}

/** Long-term average spectrum of the louder frames in `bands` log-spaced bands (100 Hz..7.5 kHz), dB relative to the total. */
export function ltas(x: Int16Array, rate: number, bands = 20): number[] {
  const N = 512;
  const power = new Float64Array(N / 2);
  const overall = rms(x);
  const win = Array.from({ length: N }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N));
  for (let s = 0; s + N <= x.length; s += N / 2) {
    if (rms(x.subarray(s, s + N)) < overall * 0.3) continue;
    const re = new Float64Array(N);
    const im = new Float64Array(N);
    for (let i = 0; i < N; i++) re[i] = x[s + i] * win[i];
    fft(re, im);
    for (let k = 0; k < N / 2; k++) power[k] += re[k] * re[k] + im[k] * im[k];
  }
  const edges = Array.from({ length: bands + 1 }, (_, i) => 100 * Math.pow(7500 / 100, i / bands));
  const out = new Array<number>(bands).fill(0);
  for (let k = 0; k < N / 2; k++) {
    const f = (k * rate) / N;
    for (let b = 0; b < bands; b++) if (f >= edges[b] && f < edges[b + 1]) out[b] += power[k];
  }
  const total = out.reduce((a, v) => a + v, 0);
  return out.map((v) => 10 * Math.log10(v / total + 1e-12));
}

/** RMS difference of two LTAS, in dB. */
export function ltasDistance(a: readonly number[], b: readonly number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) ** 2;
  return Math.sqrt(s / a.length);
}
