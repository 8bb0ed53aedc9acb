/**
 * Where the optional whisper.cpp binding comes from and whether it can be loaded here: module look-ups only,
 * cheap enough for the provider declaration (./provider.ts) to ask at any time, without loading the binding.
 */

export const WHISPER_PACKAGE = '@fugood/whisper.node';
/** the version the engine was written against (its API: initWhisper, transcribeData, release) */
export const WHISPER_VERSION = '1.1.3';

/** The binding's prebuilt CPU package for this platform (what it loads; its GPU variants are not needed). */
export function whisperPlatformPackage(platform: string = process.platform, arch: string = process.arch): string {
  return `@fugood/node-whisper-${platform}-${arch}`;
}

/** The one command that installs the binding without its ~240 MB of GPU variants, run in Portico's folder. */
export function whisperInstallCommand(platform: string = process.platform, arch: string = process.arch): string {
  return `npm install --no-save --omit=optional ${WHISPER_PACKAGE}@${WHISPER_VERSION} ${whisperPlatformPackage(platform, arch)}@${WHISPER_VERSION}`;
}

export const WHISPER_INSTALL_HINT = `install the whisper binding (${whisperInstallCommand()}) and configure or pull a ggml model (portico models pull whisper:base.en); see docs/models.md`;

/**
 * Whether the binding can be loaded from here (cheap; loads nothing): the package and, for the default one, its
 * prebuilt package for this platform (the binding loads that one; without it, it fails at the first use).
 */
export function detectWhisperBinding(packageName = WHISPER_PACKAGE): boolean {
  const resolves = (spec: string) => {
    try {
      import.meta.resolve(spec);
      return true;
    } catch {
      return false;
    }
  };
  if (!resolves(packageName)) return false;
  return packageName !== WHISPER_PACKAGE || resolves(whisperPlatformPackage());
}
