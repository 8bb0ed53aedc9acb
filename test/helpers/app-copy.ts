import { spawnSync } from 'node:child_process';
import { cpSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** the checkout this compiled file belongs to (dist/test/helpers -> the root) */
export const CHECKOUT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

/** what an install of Portico holds besides node_modules: what scripts/build.mjs --app reads, and the lock */
const APP_FILES = ['src', 'web', 'scripts', 'package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.app.json'];

/**
 * Copies the application's sources into `dir` (an empty folder) as an install has them, with the checkout's
 * node_modules linked; with `build`, runs scripts/build.mjs there with those arguments (it writes dist/ in the copy,
 * never the checkout's).
 */
export function copyApp(dir: string, build?: string[]): void {
  for (const f of APP_FILES) cpSync(join(CHECKOUT, f), join(dir, f), { recursive: true });
  symlinkSync(join(CHECKOUT, 'node_modules'), join(dir, 'node_modules'));
  if (!build) return;
  const r = spawnSync(process.execPath, ['scripts/build.mjs', ...build], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  if (r.status !== 0) throw new Error(`scripts/build.mjs ${build.join(' ')} failed: ${r.stderr?.toString()}`);
}
