/**
 * The six OpenAI voices mapped to six clearly different embedded voices (see
 * shared/reference/engines.md: these six were listened to and are distinct).
 */
import type { Voice } from '../engines/types.js';

export type EmbeddedTtsKind = 'flite' | 'espeak';

export interface VoiceTarget {
  /** which embedded engine speaks this voice */
  engine: EmbeddedTtsKind;
  /** the engine's own voice id */
  voice: string;
  /** short description, for docs and /v1/models-like listings */
  description: string;
}

export const OPENAI_VOICES: readonly Voice[] = ['alloy', 'echo', 'fable', 'onyx', 'nova', 'shimmer'];

const MAP: Record<Voice, VoiceTarget> = {
  alloy: { engine: 'flite', voice: 'slt', description: 'flite slt: US English, female, clear (the most natural flite voice)' },
  echo: { engine: 'flite', voice: 'rms', description: 'flite rms: US English, male' },
  fable: { engine: 'flite', voice: 'awb', description: 'flite awb: Scottish English, male' },
  onyx: { engine: 'flite', voice: 'kal16', description: 'flite kal16: US English, male, low, diphone' },
  nova: { engine: 'espeak', voice: 'en-us+f3', description: 'espeak-ng en-us+f3: US English, female, bright' },
  shimmer: { engine: 'espeak', voice: 'en-us+f5', description: 'espeak-ng en-us+f5: US English, female, soft' },
};

export function isOpenAiVoice(x: unknown): x is Voice {
  return typeof x === 'string' && Object.prototype.hasOwnProperty.call(MAP, x);
}

/** The embedded engine and engine voice for an OpenAI voice. */
export function embeddedVoiceFor(voice: Voice): VoiceTarget {
  const t = MAP[voice];
  if (!t) throw new RangeError(`unknown voice ${String(voice)}`);
  return t;
}
