/**
 * The pieces of `portico models pull` that need no network: reference syntax, default names, which GGUF of a
 * repository is picked, settings, file sniffing and the progress display.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, openSync, rmSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { partialProgress } from '../../src/models/pull/download.js';
import { parseModelRef } from '../../src/models/pull/refs.js';
import { defaultModelName, checkModelName, quantInFileName } from '../../src/models/pull/names.js';
import { pickGguf } from '../../src/models/pull/pull.js';
import { PullError } from '../../src/models/pull/errors.js';
import { pullSettings } from '../../src/models/pull/settings.js';
import { describeBytes, sniffFormat } from '../../src/models/pull/verify.js';
import { createProgressRenderer } from '../../src/models/pull/progress.js';
import { ConfigError } from '../../src/platform/config.js';
import { pulledModelSpecs } from '../../src/models/pull/specs.js';

const HUB = 'https://huggingface.co';

test('refs: the accepted forms', () => {
  assert.deepEqual(parseModelRef('hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF', HUB), {
    kind: 'hf-repo',
    text: 'hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF',
    owner: 'Qwen',
    repo: 'Qwen2.5-0.5B-Instruct-GGUF',
    quant: undefined,
    revision: 'main',
  });
  assert.deepEqual(parseModelRef('hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0', HUB), {
    kind: 'hf-repo',
    text: 'hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:q8_0',
    owner: 'Qwen',
    repo: 'Qwen2.5-0.5B-Instruct-GGUF',
    quant: 'Q8_0',
    revision: 'main',
  });
  const f = parseModelRef('hf:bartowski/Llama-3.2-1B-Instruct-GGUF/sub/Llama-3.2-1B-Instruct-Q4_K_M.gguf#v2', HUB);
  assert.deepEqual(f, { kind: 'hf-file', text: f.text, owner: 'bartowski', repo: 'Llama-3.2-1B-Instruct-GGUF', file: 'sub/Llama-3.2-1B-Instruct-Q4_K_M.gguf', revision: 'v2' });
  assert.deepEqual(parseModelRef('whisper:base.en', HUB), {
    kind: 'hf-file',
    text: 'whisper:base.en',
    owner: 'ggerganov',
    repo: 'whisper.cpp',
    file: 'ggml-base.en.bin',
    revision: 'main',
    whisper: 'base.en',
  });
  // hub URLs are hf: references (checksum, token); /blob/ pages too
  const u = parseModelRef('https://huggingface.co/ggerganov/whisper.cpp/blob/main/ggml-small.bin', HUB);
  assert.equal(u.kind, 'hf-file');
  assert.equal((u as any).file, 'ggml-small.bin');
  assert.equal(parseModelRef('https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF', HUB).kind, 'hf-repo');
  // a mirror's URLs when the hub address points at it
  assert.equal(parseModelRef('http://127.0.0.1:9/hub/o/r/resolve/main/m.gguf', 'http://127.0.0.1:9/hub').kind, 'hf-file');
  const other = parseModelRef('https://example.com/models/m.gguf?x=1', HUB);
  assert.equal(other.kind, 'url');
});

test('refs: bad input gets a clear error naming the accepted forms', () => {
  const cases: Array<[string, RegExp]> = [
    ['', /it is empty/],
    ['qwen', /unknown form/],
    ['Qwen/Qwen2.5-0.5B-Instruct-GGUF', /did you mean hf:Qwen\/Qwen2.5-0.5B-Instruct-GGUF\?/],
    ['hf:onlyowner', /names <owner>\/<repo>/],
    ['hf:o/r:Q4 K', /bad quantization/],
    ['hf:o/../x.gguf', /bad repository name|bad file path/],
    ['hf:o/r/../../etc/passwd', /bad file path segment "\.\."/],
    ['hf:o/r/a.gguf#', /bad revision/],
    ['whisper:', /bad whisper model name/],
    ['whisper:../../x', /bad whisper model name/],
    ['ftp://example.com/m.gguf', /scheme "ftp:" is not supported/],
    ['https://user:pw@example.com/m.gguf', /user name or password/],
    ['https://', /not a valid URL/],
  ];
  for (const [ref, re] of cases) {
    assert.throws(
      () => parseModelRef(ref, HUB),
      (e: unknown) => {
        assert.ok(e instanceof PullError, ref);
        assert.equal(e.code, 'bad_ref');
        assert.match(e.message, re, ref);
        assert.match(e.message, /hf:<owner>\/<repo>\[:<quant>\]/);
        return true;
      },
    );
  }
});

test('names: the default served name of a file', () => {
  assert.equal(defaultModelName('qwen2.5-0.5b-instruct-q4_k_m.gguf'), 'qwen2.5-0.5b-instruct:q4_k_m');
  assert.equal(defaultModelName('Llama-3.2-1B-Instruct-Q4_K_M.gguf'), 'llama-3.2-1b-instruct:q4_k_m');
  assert.equal(defaultModelName('tinyllama-1.1b-chat-v1.0.Q8_0.gguf'), 'tinyllama-1.1b-chat-v1.0:q8_0');
  assert.equal(defaultModelName('sub/dir/Model-IQ4_XS.gguf'), 'model:iq4_xs');
  assert.equal(defaultModelName('Qwen3-8B-Q4_K_M-00001-of-00002.gguf'), 'qwen3-8b:q4_k_m');
  assert.equal(defaultModelName('nomic-embed-text-v1.5.f16.gguf'), 'nomic-embed-text-v1.5:f16');
  assert.equal(defaultModelName('model.gguf'), 'model');
  assert.equal(defaultModelName('Q4_K_M.gguf'), 'q4_k_m'); // nothing but a quantization: kept as the name
  assert.equal(defaultModelName('ggml-base.en.bin'), 'whisper-base.en');
  assert.equal(defaultModelName('ggml-large-v3-turbo-q5_0.bin'), 'whisper-large-v3-turbo:q5_0');
  assert.equal(defaultModelName('Weird Name (1).gguf'), 'weird-name-1-');
  assert.equal(defaultModelName('qwen2.5-0.5b-instruct-q4_k_m.gguf', 'Qwen'), 'qwen/qwen2.5-0.5b-instruct:q4_k_m');
  // Q4_K is not Q4_K_M, IQ4_XS is not Q4_X
  assert.equal(quantInFileName('a-Q4_K_M.gguf'), 'Q4_K_M');
  assert.equal(quantInFileName('a-Q4_K.gguf'), 'Q4_K');
  assert.equal(quantInFileName('a-IQ4_XS.gguf'), 'IQ4_XS');
  assert.equal(quantInFileName('a-q4.gguf'), undefined);
  assert.equal(checkModelName('my-model:latest'), 'my-model:latest');
  for (const bad of ['', ' x', 'a b', '-x', 'x'.repeat(201), 'a\nb']) assert.throws(() => checkModelName(bad), /not a usable model name/);
});

test('pickGguf: default Q4_K_M, the only GGUF, a named quantization, and clear refusals', () => {
  const f = (...paths: string[]) => paths.map((path) => ({ path }));
  const repo = f('README.md', 'm-Q4_K_M.gguf', 'm-Q4_K_S.gguf', 'm-Q8_0.gguf', 'mmproj-m-f16.gguf', 'big-Q4_K_M-00001-of-00002.gguf', 'big-Q4_K_M-00002-of-00002.gguf');
  assert.throws(() => pickGguf(repo, undefined, 'hf:o/r'), /has 2 Q4_K_M files \(m-Q4_K_M.gguf, big-Q4_K_M-00001-of-00002.gguf\)/);
  assert.equal(pickGguf(f('m-Q4_K_M.gguf', 'm-Q8_0.gguf', 'mmproj-m-f16.gguf'), undefined, 'x').path, 'm-Q4_K_M.gguf');
  assert.equal(pickGguf(repo, 'Q8_0', 'x').path, 'm-Q8_0.gguf');
  assert.equal(pickGguf(repo, 'Q4_K_S', 'x').path, 'm-Q4_K_S.gguf');
  assert.equal(pickGguf(f('only.gguf', 'mmproj.gguf'), undefined, 'x').path, 'only.gguf');
  assert.throws(() => pickGguf(f('a-Q8_0.gguf', 'a-F16.gguf'), undefined, 'hf:o/r'), /hf:o\/r has no Q4_K_M GGUF \(the default\); it has: F16, Q8_0/);
  assert.throws(() => pickGguf(f('a-Q8_0.gguf'), 'Q2_K', 'hf:o/r'), /has no Q2_K GGUF; it has: Q8_0/);
  assert.throws(
    () => pickGguf(f('model.safetensors', 'config.json'), undefined, 'hf:o/r'),
    (e: unknown) => e instanceof PullError && e.code === 'no_gguf' && /has no GGUF file \(it has model.safetensors, config.json\)/.test(e.message),
  );
});

test('settings: MODELS_DIR, DATA_DIR, the hub address and the token', () => {
  const s = pullSettings({ DATA_DIR: '/srv/portico', HOME: '/nonexistent' });
  assert.equal(s.modelsDir, '/srv/portico/models');
  assert.equal(s.hubEndpoint, 'https://huggingface.co');
  assert.equal(s.token, undefined);
  assert.equal(pullSettings({ MODELS_DIR: '/m', HOME: '/nonexistent' }).modelsDir, '/m');
  assert.equal(pullSettings({ HF_ENDPOINT: 'https://hf-mirror.com/', HOME: '/nonexistent' }).hubEndpoint, 'https://hf-mirror.com');
  assert.equal(pullSettings({ HF_ENDPOINT: 'https://a', PORTICO_HF_ENDPOINT: 'http://127.0.0.1:9/hub', HOME: '/nonexistent' }).hubEndpoint, 'http://127.0.0.1:9/hub');
  assert.equal(pullSettings({ HF_TOKEN: ' hf_x ', HOME: '/nonexistent' }).token, 'hf_x');
  assert.throws(
    () => pullSettings({ PORTICO_HF_ENDPOINT: 'not a url' }),
    (e: unknown) => e instanceof ConfigError && /PORTICO_HF_ENDPOINT is not a valid URL/.test(e.message),
  );
  assert.throws(() => pullSettings({ HF_ENDPOINT: 'ftp://x' }), /HF_ENDPOINT must start with https:\/\/ or http:\/\//);
});

test('sniffing: GGUF and whisper.cpp ggml magic; what other files are', () => {
  assert.equal(sniffFormat(Buffer.from('GGUF\x03\x00\x00\x00')), 'gguf');
  const ggml = Buffer.alloc(8);
  ggml.writeUInt32LE(0x67676d6c, 0);
  assert.equal(sniffFormat(ggml), 'ggml');
  assert.equal(sniffFormat(Buffer.from('<!DOCTYPE html>')), undefined);
  assert.match(describeBytes(Buffer.from('<!DOCTYPE html><html>')), /HTML/);
  assert.match(describeBytes(Buffer.from('version https://git-lfs.github.com/spec/v1')), /Git LFS pointer/);
  assert.match(describeBytes(Buffer.from('PK\x03\x04zzzz')), /ZIP/);
  assert.match(describeBytes(Buffer.alloc(0)), /empty/);
  assert.match(describeBytes(Buffer.from([1, 2, 3, 4, 5, 6, 7, 8])), /starts with "\.{8}" \(0102030405060708\)/);
});

function sink(tty: boolean, columns = 100) {
  const out: string[] = [];
  return { out, stream: { isTTY: tty, columns, write: (s: string) => out.push(s) } };
}

test('progress: a terminal gets one redrawn bar with size, speed and time left', () => {
  let now = 0;
  const { out, stream } = sink(true, 100);
  const r = createProgressRenderer(stream, { now: () => now });
  r.event({ type: 'resolved', ref: 'hf:o/r', name: 'm:q4_k_m', source: 'https://hub/o/r/resolve/x/m.gguf', file: 'hf/o/r/m.gguf', size: 100_000_000, resumeFrom: 0, kept: 0 });
  for (let i = 0; i <= 10; i++) {
    now = i * 1000;
    r.event({ type: 'progress', downloaded: i * 10_000_000, total: 100_000_000 });
  }
  r.end();
  const text = out.join('');
  assert.match(text, /^pulling m:q4_k_m from https:\/\/hub\/o\/r\/resolve\/x\/m.gguf \(100.0 MB\)\n/);
  const draws = out.filter((s) => s.startsWith('\r\x1b[K'));
  assert.equal(draws.length, 11, 'one redraw per update at least 100 ms apart');
  assert.equal(draws[0], '\r\x1b[K[........................................]   0%  0 B / 100.0 MB  -- B/s  --:-- left');
  assert.equal(draws[5], '\r\x1b[K[####################....................]  50%  50.0 MB / 100.0 MB  10.0 MB/s  0:05 left');
  assert.equal(draws[10], '\r\x1b[K[########################################] 100%  100.0 MB / 100.0 MB  10.0 MB/s  0:00 left');
  // faster updates than 10 a second are not drawn
  now = 10_050;
  r.event({ type: 'progress', downloaded: 99_000_000, total: 100_000_000 });
  assert.equal(out.filter((s) => s.startsWith('\r\x1b[K')).length, 11);
  assert.ok(
    draws.every((d) => d.length <= 104),
    'fits the terminal width',
  );
  assert.ok(text.endsWith('\n'), 'the line is ended before anything else is printed');
  // a terminal that reports no width (columns 0, as under `script`) is drawn 80 wide, not cut to nothing
  const narrow = sink(true, 0);
  const r2 = createProgressRenderer(narrow.stream, { now: () => 0 });
  r2.event({ type: 'progress', downloaded: 1, total: 2 });
  assert.match(narrow.out.join(''), /^\r\x1b\[K\[#{10}\.{10}\] {2}50% {2}1 B \/ 2 B/);
});

test('progress: not a terminal gets plain lines, one per 10 %, without escape codes; resumed bytes do not count as speed', () => {
  let now = 0;
  const { out, stream } = sink(false);
  const r = createProgressRenderer(stream, { now: () => now });
  r.event({ type: 'resolving', ref: 'hf:o/r' });
  r.event({ type: 'resolved', ref: 'hf:o/r', name: 'm', source: 's', file: 'f', size: 200_000_000, sha256: 'a'.repeat(64), resumeFrom: 100_000_000, kept: 100_000_000 });
  for (let i = 0; i <= 100; i++) {
    now = i * 100;
    r.event({ type: 'progress', downloaded: 100_000_000 + i * 1_000_000, total: 200_000_000 });
  }
  r.event({ type: 'verifying', done: 0, total: 200_000_000 });
  r.event({ type: 'verifying', done: 200_000_000, total: 200_000_000 });
  const lines = out.join('').split('\n').filter(Boolean);
  assert.ok(!out.join('').includes('\x1b'), 'no escape codes in logs');
  assert.equal(lines[0], 'resolving hf:o/r');
  assert.equal(lines[1], 'pulling m from s (200.0 MB, SHA-256 announced), resuming at 100.0 MB');
  const progress = lines.filter((l) => l.startsWith('downloading m: '));
  assert.deepEqual(
    progress.map((l) => /: (\d+)%/.exec(l)![1]),
    ['50', '60', '70', '80', '90', '100'],
  );
  assert.match(progress[3], /^downloading m: 80% \(160.0 MB \/ 200.0 MB, 10.0 MB\/s, 0:04 left\)$/);
  assert.equal(lines.filter((l) => l.startsWith('verifying')).length, 1);
  // complete chunks past a gap are said too (they are not fetched again), apart from where the transfer goes on
  const gap = sink(false);
  createProgressRenderer(gap.stream).event({ type: 'resolved', ref: 'r', name: 'm', source: 's', file: 'f', size: 30_000_000, resumeFrom: 5_000_000, kept: 15_000_000 });
  assert.equal(gap.out.join(''), 'pulling m from s (30.0 MB), resuming at 5.0 MB (15.0 MB already downloaded)\n');
});

test('partialProgress: what a partial file holds is read from its record of complete chunks, never from its size', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-partial-'));
  const CHUNK = 5 * 1024 * 1024;
  const total = 4 * CHUNK + 1234;
  const file = join(dir, 'm.gguf.ipull');
  /** a partial file as ipull leaves it: data written at `written` offsets (holes between), then its record at `total` */
  const partial = (written: Array<[number, number]>, record?: string) => {
    writeFileSync(file, '');
    const fd = openSync(file, 'r+');
    try {
      for (const [at, n] of written) writeSync(fd, Buffer.alloc(n, 1), 0, n, at);
      if (record !== undefined) writeSync(fd, Buffer.from(record), 0, Buffer.byteLength(record), total);
    } finally {
      closeSync(fd);
    }
  };
  const rec = (chunks: number[], extra: Record<string, unknown> = {}) => JSON.stringify({ part: 0, chunks, chunkSize: CHUNK, parallelStreams: 3, ...extra });
  try {
    assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: 0, kept: 0 }, 'no partial file');
    // three transfers at once wrote 3 MB at the start and 4 MB in the middle: the file is 14 MB long, nothing is complete
    partial([
      [0, 3_000_000],
      [2 * CHUNK, 4_000_000],
    ]);
    assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: 0, kept: 0 }, 'the size of a file without a record says nothing');
    // chunks 0 and 1 complete, 2 under way (fetched again from its start), the last (short) one complete
    partial([[0, total]], rec([2, 2, 1, 0, 2]));
    assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: 2 * CHUNK, kept: 2 * CHUNK + 1234 });
    partial([[0, total]], rec([2, 2, 2, 2, 2]));
    assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: total, kept: total });
    partial([[0, CHUNK]], rec([0, 2, 0, 0, 0]));
    assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: 0, kept: CHUNK }, 'a gap at the start: nothing to go on from');
    // records ipull would not resume from either: unreadable, another file's, another part
    for (const bad of ['{"part":0,"chu', rec([2, 2]), rec([2, 2, 2, 2, 2], { part: 1 }), rec([2, 2, 2, 2, 2], { chunkSize: -1 }), 'null']) {
      partial([[0, total]], bad);
      assert.deepEqual(await partialProgress(dir, 'm.gguf', total), { contiguous: 0, kept: 0 }, bad);
    }
    // without the size, where the record starts is unknown: ipull cannot resume, nothing counts
    partial([[0, total]], rec([2, 2, 2, 2, 2]));
    assert.deepEqual(await partialProgress(dir, 'm.gguf', undefined), { contiguous: 0, kept: 0 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('registry entries: one per name and alias, the engine by kind', () => {
  const base = { format: 'gguf' as const, file: 'f', size: 1, sha256: 'a', source: { ref: 'r', url: 'u' }, pulledAt: '' };
  const specs = pulledModelSpecs([
    { ...base, name: 'qwen:q4_k_m', aliases: ['qwen'], kind: 'text', path: '/m/q.gguf' },
    { ...base, name: 'e5:f16', aliases: [], kind: 'embedding', path: '/m/e.gguf' },
    { ...base, format: 'ggml', name: 'whisper-base.en', aliases: [], kind: 'transcription', path: '/m/w.bin' },
  ]);
  assert.deepEqual(specs, [
    { name: 'qwen:q4_k_m', provider: 'llama', type: 'text', path: '/m/q.gguf', model: 'qwen:q4_k_m' },
    { name: 'qwen', provider: 'llama', type: 'text', path: '/m/q.gguf', model: 'qwen:q4_k_m' },
    { name: 'e5:f16', provider: 'llama', type: 'embedding', path: '/m/e.gguf', model: 'e5:f16' },
    { name: 'whisper-base.en', provider: 'whisper', type: 'transcription', path: '/m/w.bin', model: 'whisper-base.en' },
  ]);
});
