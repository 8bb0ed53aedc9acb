/**
 * The real pocketsphinx_continuous, run once per distinct input: a `pocketsphinx_continuous` first on PATH that
 * runs the installed decoder on an input (the same bytes with the same arguments) it has not seen, keeps what the
 * decoder printed, and prints that again for the same input later instead of decoding it again. The decoder is
 * deterministic (same bytes, same arguments, same output), so a replayed answer is the one a new run would give:
 * Portico (decoding, pieces, the engine's parsing, every response format, usage) runs for real on every request,
 * only the second and later decodes of one input are skipped.
 *
 * For the files that ask the same recognition many times to check what Portico makes of it (every response_format
 * of one sentence). `real()` turns the replay off for the requests in it, for the checks that must see a new
 * decoder run. Not for tests that abort a recognition (a killed wrapper would leave its decoder running) nor for
 * those counting decoder processes.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { findOnPath } from '../../src/engines/pocketsphinx/detect.js';

const script = (real: string) => `#!/bin/sh
# written by test/audio/replay-decoder.ts
dir=$(dirname "$0")
infile=
prev=
for a in "$@"; do
  [ "$prev" = -infile ] && infile=$a
  prev=$a
done
# the key: every argument but the input's (temporary) path, and the input's bytes
key=$({ for a in "$@"; do [ "$a" = "$infile" ] || printf '%s\\n' "$a"; done; cat "$infile"; } | sha256sum | cut -c1-64)
if [ ! -e "$dir/real" ] && [ -f "$dir/cache/$key" ]; then
  echo replay >> "$dir/runs.log"
  exec cat "$dir/cache/$key"
fi
echo real >> "$dir/runs.log"
'${real}' "$@" > "$dir/cache/$key.$$" || { code=$?; rm -f "$dir/cache/$key.$$"; exit $code; }
mv "$dir/cache/$key.$$" "$dir/cache/$key"
exec cat "$dir/cache/$key"
`;

export class ReplayDecoder {
  readonly dir = mkdtempSync(join(tmpdir(), 'portico-replay-decoder-'));
  private readonly path = process.env.PATH;
  /** whether the wrapper is in place (pocketsphinx_continuous is installed) */
  readonly installed: boolean;

  /** Puts the wrapper first on PATH: before the app is built (the engine takes the binary's path then). */
  constructor() {
    const real = findOnPath('pocketsphinx_continuous');
    this.installed = real !== undefined && !real.includes("'");
    mkdirSync(join(this.dir, 'cache'));
    writeFileSync(join(this.dir, 'runs.log'), '');
    if (!this.installed) return;
    writeFileSync(join(this.dir, 'pocketsphinx_continuous'), script(real!));
    chmodSync(join(this.dir, 'pocketsphinx_continuous'), 0o755);
    process.env.PATH = this.dir + delimiter + (this.path ?? '');
  }

  /** decoder runs so far: how many decoded for real, how many were replayed */
  runs(): { real: number; replay: number } {
    const lines = readFileSync(join(this.dir, 'runs.log'), 'utf8').split('\n');
    return { real: lines.filter((l) => l === 'real').length, replay: lines.filter((l) => l === 'replay').length };
  }

  /**
   * Runs `fn` with every decode in it a real one (and checks there was at least one when the wrapper is in place).
   * The switch is for the whole wrapper: for requests made one at a time, not beside others that may replay.
   */
  async real<T>(fn: () => Promise<T>): Promise<T> {
    const flag = join(this.dir, 'real');
    const before = this.runs().real;
    writeFileSync(flag, '');
    try {
      const r = await fn();
      if (this.installed && this.runs().real === before) throw new Error('replay decoder: no real decoder run in real()');
      return r;
    } finally {
      if (existsSync(flag)) rmSync(flag);
    }
  }

  close(): void {
    process.env.PATH = this.path;
    rmSync(this.dir, { recursive: true, force: true });
  }
}
