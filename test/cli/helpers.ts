import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pgliteTemplate } from '../helpers/db-template.js';

/** the compiled `portico` command */
export const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `portico args` with only the given environment (plus PATH and HOME); never longer than 60 s. A new embedded
 * database starts from the suite's template (test/helpers/db-template.ts) unless the environment says otherwise.
 */
export async function portico(args: string[], env: Record<string, string>): Promise<Run> {
  const template = 'PORTICO_PGLITE_TEMPLATE' in env ? {} : { PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'silent', ...template, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? (((err as { code?: number }).code as number) ?? 1) : 0, stdout, stderr }),
    );
  });
}

const dirs: string[] = [];

/** A fresh temporary directory, removed by cleanTmp(). */
export function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'portico-cli-'));
  dirs.push(d);
  return d;
}

export function cleanTmp() {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}
