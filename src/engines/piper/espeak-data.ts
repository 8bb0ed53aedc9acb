/**
 * espeak-ng's data folder, which piper voices need to turn text into phonemes (sherpa-onnx has espeak-ng built
 * in, but not its data). Where it is looked for, in order:
 * 1. the model entry's `data_dir`, or PORTICO_ESPEAK_NG_DATA;
 * 2. an `espeak-ng-data` folder beside the voice (as sherpa-onnx's vits-piper-* archives ship it);
 * 3. the folders of the espeak-ng packages of Debian/Ubuntu (espeak-ng-data), Fedora, Alpine, Homebrew.
 * sherpa-onnx ends the process when espeak-ng cannot start from the folder, so a folder is only handed over when it
 * holds espeak-ng's phoneme tables and English dictionary. espeak-ng is started once per process: the first
 * folder used serves every piper voice.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { EngineError } from '../types.js';

export const SYSTEM_ESPEAK_DATA = [
  '/usr/lib/x86_64-linux-gnu/espeak-ng-data',
  '/usr/lib/aarch64-linux-gnu/espeak-ng-data',
  '/usr/share/espeak-ng-data',
  '/usr/lib/espeak-ng-data',
  '/usr/local/share/espeak-ng-data',
  '/opt/homebrew/share/espeak-ng-data',
];

/** Whether espeak-ng can start from `dir` (the files its initialisation and English phonemes read). */
export function isEspeakData(dir: string): boolean {
  return ['phontab', 'phonindex', 'phondata', 'intonations', 'en_dict'].every((f) => existsSync(join(dir, f)));
}

export function findEspeakData(given: string | undefined, modelPath: string, env: Readonly<Record<string, string | undefined>> = process.env): string {
  const explicit = given ?? (env.PORTICO_ESPEAK_NG_DATA || undefined);
  if (explicit) {
    if (!isEspeakData(explicit)) {
      // the folder is the operator's: named in the server's log (the provider's factory), not to clients
      throw new EngineError(
        `the voice's data_dir (or PORTICO_ESPEAK_NG_DATA) is not espeak-ng's data folder (it needs phontab, phonindex, phondata, intonations and en_dict)`,
        'engine_unavailable',
        503,
      );
    }
    return explicit;
  }
  for (const d of [join(dirname(modelPath), 'espeak-ng-data'), ...SYSTEM_ESPEAK_DATA]) if (isEspeakData(d)) return d;
  throw new EngineError(
    "Piper voices need espeak-ng's data folder for their phonemes, and none was found: install espeak-ng " +
      '(apt install espeak-ng-data, brew install espeak-ng), or set data_dir on the model (or PORTICO_ESPEAK_NG_DATA) to an espeak-ng-data folder ' +
      "(sherpa-onnx's vits-piper archives ship one); see docs/models.md",
    'engine_unavailable',
    503,
  );
}
