/**
 * A scripted pocketsphinx_continuous for the audio tests that need to decide when recognition ends (a configured
 * `provider: pocketsphinx` model whose `binary` is this script): each decoder process logs "pid seconds" when it
 * starts and answers the word `piece<seconds>` once the test writes release-<pid> (or exits 3 on fail-<pid>).
 * The fair-sharing tests (test/audio/fairness.test.ts) use it too.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ModelSpec } from '../../src/models/config.js';
import assert from 'node:assert/strict';
import { eventually, wavFile } from './helpers.js';

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

/**
 * 8 s of 16 kHz audio whose only silent stretch is at 3.2 s: in pieces of at most 5 s it is cut there, into
 * pieces of 3.2 s and 4.8 s (the scripted decoder answers "piece3" and "piece5").
 */
export function twoPieces(): Buffer {
  const rate = 16000;
  const s = new Int16Array(8 * rate);
  for (let i = 0; i < s.length; i++) s[i] = Math.round(Math.sin(i * 0.3) * 3000);
  s.fill(0, Math.round(3.18 * rate), Math.round(3.22 * rate));
  return wavFile(s, rate);
}

/** the two pieces' decoder processes, shorter first */
export function byLength<T extends { seconds: number }>(starts: T[]): [T, T] {
  const two = starts.slice(-2).sort((a, b) => a.seconds - b.seconds);
  return [two[0]!, two[1]!];
}

/** the parsed `data:` events of an SSE response, as they arrive */
export async function* eventsOf(res: Response): AsyncGenerator<unknown> {
  if (res.status !== 200) assert.fail(`status ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    let at: number;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      if (data) yield JSON.parse(data);
    }
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
  }
}
