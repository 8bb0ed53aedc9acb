/** espeak speaks 175 words per minute at speed 1 and accepts 80..450; the rest is done by time stretching. */
export const ESPEAK_BASE_WPM = 175;
export const ESPEAK_MIN_WPM = 80;
export const ESPEAK_MAX_WPM = 450;

export function espeakRate(speed: number): { wpm: number; residual: number } {
  const s = Number.isFinite(speed) && speed > 0 ? Math.min(4, Math.max(0.25, speed)) : 1;
  const wanted = ESPEAK_BASE_WPM * s;
  const wpm = Math.round(Math.min(ESPEAK_MAX_WPM, Math.max(ESPEAK_MIN_WPM, wanted)));
  const residual = Math.abs(wanted - wpm) < 1 ? 1 : wanted / wpm;
  return { wpm, residual };
}

/**
 * espeak's pitch parameter (0..99, 50 = the voice's own) for a factor on the voice's pitch. Measured on the
 * English variants: the parameter moves the base pitch by about 0.45 x its relative change (70 instead of
 * 50 raises it about 18 %), so the factor is approximate.
 */
export function espeakPitch(factor: number): number {
  const f = Number.isFinite(factor) && factor > 0 ? factor : 1;
  return Math.round(Math.min(99, Math.max(0, 50 * (1 + (f - 1) / 0.45))));
}
