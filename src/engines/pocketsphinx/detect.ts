/**
 * Whether Debian's pocketsphinx command line recognizer and its English model are installed: file checks only,
 * cheap enough for the provider declaration (./provider.ts) to ask at any time, without loading the engine.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { basename, delimiter, join } from 'node:path';

export type PocketsphinxFlavor = 'continuous' | 'json';

export const POCKETSPHINX_INSTALL_HINT = 'apt-get install pocketsphinx pocketsphinx-en-us';
/** where Debian's pocketsphinx-en-us puts the acoustic model the Debian binaries use by default */
export const DEBIAN_MODEL_DIR = '/usr/share/pocketsphinx/model/en-us/en-us';

export interface PocketsphinxDetection {
  available: boolean;
  binary?: string;
  flavor?: PocketsphinxFlavor;
  /** what is missing, in words, when not available */
  reason?: string;
  /** the command that installs what is missing */
  install: string;
}

export function findOnPath(name: string): string | undefined {
  const candidates = name.includes('/')
    ? [name]
    : (process.env.PATH ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((d) => join(d, name));
  for (const p of candidates) {
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return undefined;
}

export function flavorOf(binary: string): PocketsphinxFlavor {
  return basename(binary) === 'pocketsphinx' ? 'json' : 'continuous';
}

/** Whether a usable pocketsphinx CLI and its English model are installed (synchronous, cheap: file checks only). */
export function detectPocketsphinx(opts: { binary?: string; hmm?: string; flavor?: PocketsphinxFlavor } = {}): PocketsphinxDetection {
  const names = opts.binary ? [opts.binary] : ['pocketsphinx_continuous', 'pocketsphinx'];
  let binary: string | undefined;
  for (const n of names) {
    binary = findOnPath(n);
    if (binary) break;
  }
  if (!binary) {
    return {
      available: false,
      reason: `no pocketsphinx executable (${names.join(' or ')}) on PATH`,
      install: POCKETSPHINX_INSTALL_HINT,
    };
  }
  const modelDir = opts.hmm ?? DEBIAN_MODEL_DIR;
  if (!existsSync(join(modelDir, 'mdef'))) {
    return {
      available: false,
      binary,
      reason: `pocketsphinx English model not found in ${modelDir}`,
      install: opts.hmm ? `check the configured model directory ${opts.hmm}` : 'apt-get install pocketsphinx-en-us',
    };
  }
  return { available: true, binary, flavor: opts.flavor ?? flavorOf(binary), install: POCKETSPHINX_INSTALL_HINT };
}
