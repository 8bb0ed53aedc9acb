/**
 * Which speaker of a piper voice says each OpenAI voice. A multi-speaker voice (en_US-libritts_r-medium has 904
 * speakers) gives each of the thirteen names a speaker of its own, spread over its speakers (or the ones the model
 * entry's `speakers` names); a voice with fewer speakers than names reuses them in turn, which the listing says.
 */
import type { Voice } from '../types.js';
import type { PiperVoiceConfig } from './voice-files.js';

/** OpenAI's voice names, in the order they take speakers. */
export const PIPER_OPENAI_VOICES: readonly Voice[] = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'];

export interface SpeakerChoice {
  id: number;
  /** the speaker's name in the voice's .onnx.json, when it has one */
  name?: string;
}

/** The speaker of each OpenAI voice; `given` overrides some (a speaker id, or a name of the voice's speaker_id_map). */
export function speakerTable(config: PiperVoiceConfig, given: Readonly<Record<string, number | string>> = {}): Record<string, SpeakerChoice> {
  const n = config.speakers;
  const out: Record<string, SpeakerChoice> = {};
  PIPER_OPENAI_VOICES.forEach((v, i) => {
    const g = given[v];
    let id: number;
    if (g === undefined) id = n >= PIPER_OPENAI_VOICES.length ? Math.floor((i * n) / PIPER_OPENAI_VOICES.length) : i % n;
    else if (typeof g === 'number') id = g;
    else {
      id = config.speakerNames.indexOf(g);
      if (id < 0) throw new Error(`speakers.${v}: the voice has no speaker "${g}"`);
    }
    if (!Number.isInteger(id) || id < 0 || id >= n) throw new Error(`speakers.${v}: speaker ${id} is not one of the voice's ${n} (0..${n - 1})`);
    out[v] = { id, ...(config.speakerNames[id] ? { name: config.speakerNames[id] } : {}) };
  });
  return out;
}

/** One line for listings: which speaker says each name. */
export function describeSpeakers(table: Readonly<Record<string, SpeakerChoice>>): string {
  return Object.entries(table)
    .map(([v, s]) => `${v}=${s.name ?? `speaker ${s.id}`}`)
    .join(', ');
}
