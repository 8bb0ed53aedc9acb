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

export interface Served {
  proc: import('node:child_process').ChildProcess;
  url: string;
  out(): string;
  /** SIGTERM, and the exit awaited */
  stop(): Promise<void>;
}

/**
 * `portico serve` in a child process with only the given environment (plus PATH, HOME, PORT=0 and JSON logs at info), a
 * new embedded database made from the suite's template; resolves once it listens. The bound on the start is only a net
 * under the caller's timeout (a first start on a loaded machine can take long).
 */
export async function startServe(env: Record<string, string>): Promise<Served> {
  const { spawn } = await import('node:child_process');
  const template = 'PORTICO_PGLITE_TEMPLATE' in env ? {} : { PORTICO_PGLITE_TEMPLATE: await pgliteTemplate() };
  const proc = spawn(process.execPath, [CLI, 'serve'], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', LOG_LEVEL: 'info', LOG_FORMAT: 'json', ...template, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`server did not start: ${out}`));
    }, 120_000);
    const check = () => {
      const m = /Portico listening on (http:\/\/[^\s"]+?)[ "]/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    };
    proc.stdout!.on('data', check);
    void exited.then(() => {
      clearTimeout(t);
      reject(new Error(`server exited ${proc.exitCode}: ${out}`));
    });
  });
  return {
    proc,
    url,
    out: () => out,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}
