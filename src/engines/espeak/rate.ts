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
