/**
 * Time stretching without pitch change (WSOLA: waveform-similarity overlap-add). Used where an engine
 * cannot reach a requested speed by itself (espeak's rate stops at 80..450 words per minute).
 */

/** Returns `input` played `speed` times faster (speed 2: half the length) at the same pitch. */
export function timeStretch(input: Int16Array, speed: number, sampleRate: number): Int16Array {
  if (!(speed > 0) || Math.abs(speed - 1) < 1e-3) return input;
  let n = Math.round(sampleRate * 0.03);
  n += n & 1;
  const hs = n / 2;
  const ha = hs * speed;
  const tol = Math.round(n / 4);
  const targetLen = Math.round(input.length / speed);
  if (input.length < 2 * n + 2 * tol) return naiveStretch(input, targetLen);

  const x = new Float32Array(input);
  const win = new Float32Array(n);
  for (let i = 0; i < n; i++) win[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * (i + 0.5)) / n);

  const outLen = targetLen + n;
  const y = new Float32Array(outLen);
  const wsum = new Float32Array(outLen);
  let prev = 0;
  for (let k = 0; ; k++) {
    const outPos = k * hs;
    if (outPos + n > outLen) break;
    const nominal = Math.round(k * ha);
    if (nominal + n + tol >= x.length) break;
    let pos = nominal;
    if (k > 0) {
      // best match, around the nominal position, for the natural continuation of the previous frame
      const target = prev + hs;
      const lo = Math.max(0, nominal - tol);
      const hi = Math.min(x.length - n, nominal + tol);
      let best = -Infinity;
      for (let c = lo; c <= hi; c += 2) {
        let s = 0;
        for (let i = 0; i < hs; i += 2) s += x[target + i]! * x[c + i]!;
        if (s > best) {
          best = s;
          pos = c;
        }
      }
    }
    // in range: outPos + n <= outLen and pos + n < x.length (the breaks above, and hi <= x.length - n)
    for (let i = 0; i < n; i++) {
      const w = win[i]!;
      y[outPos + i]! += x[pos + i]! * w;
      wsum[outPos + i]! += w;
    }
    prev = pos;
  }
  const out = new Int16Array(targetLen);
  for (let i = 0; i < targetLen; i++) {
    const ws = wsum[i]!;
    const v = ws > 1e-3 ? y[i]! / ws : 0;
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : Math.round(v);
  }
  return out;
}

/** For very short inputs: plain linear interpolation (changes pitch, but only over a few ms). */
function naiveStretch(input: Int16Array, len: number): Int16Array {
  const out = new Int16Array(len);
  if (input.length === 0) return out;
  const step = input.length / Math.max(1, len);
  for (let i = 0; i < len; i++) {
    const p = i * step;
    const j = Math.floor(p);
    const f = p - j;
    const a = input[Math.min(j, input.length - 1)]!; // input is not empty (checked above)
    const b = input[Math.min(j + 1, input.length - 1)]!;
    out[i] = Math.round(a + (b - a) * f);
  }
  return out;
}
