/**
 * Where whisper.cpp's native module comes from and whether it can be loaded here: module look-ups only, cheap
 * enough for the provider declaration (./provider.ts) to ask at any time, without loading the binary.
 *
 * Portico depends on the CPU builds of whisper.cpp's Node binding (github.com/mybigday/whisper.node) as optional
 * platform packages, `@fugood/node-whisper-<platform>-<arch>` (package.json optionalDependencies): npm installs
 * only the one whose os/cpu match, the way node-llama-cpp ships llama.cpp, so `npm ci` (and `npm ci --omit=dev`)
 * gives whisper with no manual step and no GPU variant. The binding's JavaScript wrapper (`@fugood/whisper.node`)
 * is not used: its own optional dependencies pull ~240 MB of CUDA/Vulkan builds, and it only `require`s the
 * platform package and calls `new WhisperContext(...)`, which ./index.ts does itself.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** the version pinned in package.json (the newest published for all six platforms; their API is ./index.ts's) */
export const WHISPER_VERSION = '1.1.1';

/** the platforms with a prebuilt CPU package (package.json optionalDependencies), as `${platform}-${arch}` */
export const WHISPER_PLATFORMS: readonly string[] = ['linux-x64', 'linux-arm64', 'darwin-x64', 'darwin-arm64', 'win32-x64', 'win32-arm64'];

/** The prebuilt CPU package for a platform (what ./index.ts loads; its GPU variants are not needed). */
export function whisperPlatformPackage(platform: string = process.platform, arch: string = process.arch): string {
  return `@fugood/node-whisper-${platform}-${arch}`;
}

export function hasWhisperPrebuilt(platform: string = process.platform, arch: string = process.arch): boolean {
  return WHISPER_PLATFORMS.includes(`${platform}-${arch}`);
}

/**
 * What to do when the native module cannot be loaded, for a message a client or an operator reads: on a platform
 * with a prebuilt package it was left out of the install (`--omit=optional`, `--no-optional`, a copied
 * node_modules); on another there is none, and PORTICO_WHISPER_BINDING can name one built for it.
 */
export function whisperUnavailableHint(platform: string = process.platform, arch: string = process.arch): string {
  return hasWhisperPrebuilt(platform, arch)
    ? `its package for this platform (${whisperPlatformPackage(platform, arch)}) is missing: reinstall Portico's dependencies with their optional packages (npm ci, without --omit=optional)`
    : `whisper.cpp has no prebuilt package for ${platform}-${arch} (there are for Linux, macOS and Windows on x64 and arm64): set PORTICO_WHISPER_BINDING to a whisper.cpp binding built for it`;
}

export const WHISPER_SETUP_HINT = 'pull a whisper model (portico models pull whisper:base.en) or configure a ggml model file; see docs/models.md';

const require = createRequire(import.meta.url);

/** a module specifier, a path or a file: URL -> what require/import take */
export function bindingTarget(spec: string): string {
  return spec.startsWith('file:') ? fileURLToPath(spec) : spec;
}

/**
 * Whether the binding can be loaded from here (cheap; loads nothing): `spec` (PORTICO_WHISPER_BINDING: a module
 * specifier, a path or a file: URL) or else this platform's prebuilt package.
 */
export function detectWhisperBinding(spec?: string): boolean {
  try {
    require.resolve(bindingTarget(spec ?? whisperPlatformPackage()));
    return true;
  } catch {
    return false;
  }
}
