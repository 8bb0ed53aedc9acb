/**
 * A scripted pocketsphinx_continuous for the audio tests that need to decide when recognition ends (a configured
 * `provider: pocketsphinx` model whose `binary` is this script): each decoder process logs "pid seconds" when it
 * starts and answers the word `piece<seconds>` once the test writes release-<pid> (or exits 3 on fail-<pid>). (test/audio/fairness.test.ts
 * has the same script for the fair-sharing tests.)
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelSpec } from '../../src/models/config.js';
import { eventually } from './helpers.js';

const FAKE_DECODER = `#!/usr/bin/env node
const fs = require('fs');
const path = require('path');
const args = process.argv.slice(2);
const file = args[args.indexOf('-infile') + 1];
const seconds = fs.statSync(file).size / 32000;
const dir = process.env.PORTICO_FAKE_DECODER_DIR;
fs.appendFileSync(path.join(dir, 'starts.log'), process.pid + ' ' + seconds + '\\n');
const timer = setInterval(() => {
  if (fs.existsSync(path.join(dir, 'fail-' + process.pid))) process.exit(3);
  if (!fs.existsSync(path.join(dir, 'release-' + process.pid))) return;
  clearInterval(timer);
  const w = 'piece' + Math.round(seconds);
  process.stdout.write(w + '\\n<s> 0.000 0.050 1.000000\\n' + w + ' 0.100 0.500 0.900000\\n</s> 0.510 0.600 1.000000\\n');
}, 20);
`;

/** up to this long for a condition that only needs the server to get through its work (a loaded machine) */
export const PATIENCE = 60_000;

export interface Start {
  pid: number;
  seconds: number;
}

export class FakeDecoder {
  readonly dir = mkdtempSync(join(tmpdir(), 'portico-fake-decoder-'));
  readonly binary = join(this.dir, 'pocketsphinx_continuous');
  readonly model = join(this.dir, 'model');
  constructor() {
    writeFileSync(this.binary, FAKE_DECODER);
    chmodSync(this.binary, 0o755);
    // the provider checks that an acoustic model is there (the script reads none)
    mkdirSync(this.model);
    writeFileSync(join(this.model, 'mdef'), '');
    writeFileSync(join(this.dir, 'starts.log'), '');
  }
  spec(name: string): ModelSpec {
    return { name, provider: 'pocketsphinx', type: 'transcription', binary: this.binary, path: this.model } as ModelSpec;
  }
  starts(): Start[] {
    return readFileSync(join(this.dir, 'starts.log'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const [pid, seconds] = l.split(' ');
        return { pid: Number(pid), seconds: Number(seconds) };
      });
  }
  async started(n: number): Promise<Start[]> {
    await eventually(() => this.starts().length >= n, PATIENCE, `${n} decoder processes started`);
    return this.starts();
  }
  release(s: Start): void {
    writeFileSync(join(this.dir, `release-${s.pid}`), '');
  }
  fail(s: Start): void {
    writeFileSync(join(this.dir, `fail-${s.pid}`), '');
  }
  released(s: Start): boolean {
    return existsSync(join(this.dir, `release-${s.pid}`));
  }
  close(): void {
    for (const s of this.starts()) this.release(s);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
