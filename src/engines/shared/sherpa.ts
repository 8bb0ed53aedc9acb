/**
 * sherpa-onnx (`sherpa-onnx-node`): an optional dependency whose platform package holds ONNX Runtime and sherpa's
 * library. Two users share it: the piper voices (engines/piper) and the Silero voice activity detector
 * (shared/vad). It is loaded at the first use, never at import, and once per process.
 */
import { createRequire } from 'node:module';

/** The npm package (CommonJS; its platform packages hold the library). */
export const SHERPA_PACKAGE = 'sherpa-onnx-node';

let loaded: unknown;

/**
 * The sherpa-onnx module, loaded once. Throws an Error whose message is why it could not be loaded (the first line
 * of Node's: not installed, after an `npm ci --omit=optional`, or no prebuilt library for this platform); each
 * user words its own message around it.
 */
export function loadSherpa<T>(): T {
  if (loaded) return loaded as T;
  try {
    loaded = createRequire(import.meta.url)(SHERPA_PACKAGE);
    return loaded as T;
  } catch (e) {
    throw new Error((e as Error).message.split('\n')[0]);
  }
}

/** Whether sherpa-onnx-node is installed here (its module resolves), without loading it (loading takes ~0.1 s). */
export function sherpaInstalled(): boolean {
  if (loaded) return true;
  try {
    createRequire(import.meta.url).resolve(SHERPA_PACKAGE);
    return true;
  } catch {
    return false;
  }
}
