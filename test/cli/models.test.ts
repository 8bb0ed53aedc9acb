/**
 * `portico models pull|list|rm` as a user runs it: the real command in a child process, against a local server
 * that answers like the Hugging Face hub (PORTICO_HF_ENDPOINT), output not a terminal (plain progress lines).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { FakeHub, sha256 } from '../helpers/fake-hub.js';
import { modelsCommand, type ModelsCommand } from '../../src/models/pull/cli.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import { formatBytes } from '../../src/models/pull/format.js';

const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const ENOSPC = pathToFileURL(fileURLToPath(new URL('../helpers/enospc-preload.js', import.meta.url))).href;
const TOKEN = 'hf_cli_secret_token_42';
/** the stall wait of the tests that make the hub send nothing: each try waits it out (a local hub sends a 5 MB chunk in far less) */
const STALL_MS = '1000';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let hub: FakeHub;
let tiny: Buffer;
let big: Buffer;
const dirs: string[] = [];

function home(): string {
  const d = mkdtempSync(join(tmpdir(), 'portico-models-cli-'));
  dirs.push(d);
  return d;
}

function env(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  // HOME and HF_HOME point into the temp dir: no token file of the developer's is read
  return { PATH: process.env.PATH ?? '', HOME: dataDir, HF_HOME: join(dataDir, 'hf'), DATA_DIR: dataDir, PORTICO_HF_ENDPOINT: hub.url, ...extra };
}

function portico(args: string[], e: Record<string, string>, nodeArgs: string[] = []): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [...nodeArgs, CLI, ...args], { env: e, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** The same command in this process, as the CLI hands it over once parsed: fast, for the many small cases. */
async function inProcess(cmd: ModelsCommand, e: Record<string, string>): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const code = await modelsCommand(cmd, {
    env: e,
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

function tree(dir: string): string[] {
  const out: string[] = [];
  if (!existsSync(dir)) return out;
  (function walk(d: string) {
    for (const n of readdirSync(d)) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  })(dir);
  return out.sort();
}

before(async () => {
  tiny = readFileSync(await makeTinyGguf());
  big = readFileSync(await makeTinyGguf({ nEmbd: 256, nLayer: 4, nFf: 1024 }));
  hub = await new FakeHub([TOKEN]).start();
  hub.addRepo({
    owner: 'acme',
    repo: 'Tiny-Chat-GGUF',
    files: [
      { path: 'tiny-chat-q4_k_m.gguf', data: tiny },
      { path: 'README.md', data: Buffer.from('hi') },
    ],
  });
  hub.addRepo({ owner: 'acme', repo: 'Big-GGUF', files: [{ path: 'big-Q4_K_M.gguf', data: big }] });
  hub.addRepo({ owner: 'acme', repo: 'Gated-GGUF', gated: true, files: [{ path: 'gated-Q4_K_M.gguf', data: tiny }] });
});

after(async () => {
  await hub?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('pull, list, list --json, rm: plain progress lines when not a terminal; the outcome on stdout', async () => {
  const d = home();
  const pull = await portico(['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--name', 'chat'], env(d));
  assert.equal(pull.code, 0, pull.stderr);
  const modelPath = join(d, 'models', 'hf', 'acme', 'Tiny-Chat-GGUF', 'tiny-chat-q4_k_m.gguf');
  assert.equal(
    pull.stdout,
    `pulled tiny-chat:q4_k_m (text, ${(tiny.length / 1000).toFixed(1)} KB, sha256 ${sha256(tiny).slice(0, 12)}...) to ${modelPath}; served as tiny-chat:q4_k_m, chat\n`,
  );
  const lines = pull.stderr.trim().split('\n');
  assert.equal(lines[0], 'resolving hf:acme/Tiny-Chat-GGUF');
  assert.match(
    lines[1],
    new RegExp(`^pulling tiny-chat:q4_k_m from ${hub.url}/acme/Tiny-Chat-GGUF/resolve/[0-9a-f]{40}/tiny-chat-q4_k_m.gguf \\(\\d+\\.\\d KB, SHA-256 announced\\)$`),
  );
  assert.match(pull.stderr, /^downloading tiny-chat:q4_k_m: 100% \(\d+\.\d KB \/ \d+\.\d KB, .* left\)$/m);
  assert.match(pull.stderr, /^verifying tiny-chat:q4_k_m \(\d+\.\d KB, SHA-256\)$/m);
  assert.ok(!pull.stderr.includes('\x1b') && !pull.stderr.includes('\r'), 'no terminal control codes in a log');
  assert.ok(readFileSync(modelPath).equals(tiny));

  const list = await portico(['models', 'list'], env(d));
  assert.equal(list.code, 0, list.stderr);
  const rows = list.stdout.trim().split('\n');
  assert.match(rows[0], /^NAME\s+KIND\s+SIZE\s+FILE$/);
  assert.match(rows[1], new RegExp(`^tiny-chat:q4_k_m, chat\\s+text\\s+\\d+\\.\\d KB\\s+${modelPath}$`));
  const json = JSON.parse((await inProcess({ command: 'list', json: true }, env(d))).stdout);
  assert.equal(json.length, 1);
  assert.deepEqual(
    { name: json[0].name, aliases: json[0].aliases, kind: json[0].kind, path: json[0].path, size: json[0].size, sha256: json[0].sha256 },
    { name: 'tiny-chat:q4_k_m', aliases: ['chat'], kind: 'text', path: modelPath, size: tiny.length, sha256: sha256(tiny) },
  );

  const again = await inProcess({ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF' }, env(d));
  assert.equal(again.code, 0);
  assert.equal(again.stdout, `tiny-chat:q4_k_m is already pulled (${modelPath}); served as tiny-chat:q4_k_m, chat\n`);

  const rmAlias = await inProcess({ command: 'rm', name: 'chat' }, env(d));
  assert.equal(rmAlias.stdout, 'removed the name chat; the model stays as tiny-chat:q4_k_m\n');
  const rm = await portico(['models', 'rm', 'tiny-chat:q4_k_m'], env(d));
  assert.equal(rm.code, 0);
  assert.equal(rm.stdout, `removed tiny-chat:q4_k_m and deleted ${modelPath}\n`);
  assert.equal(existsSync(modelPath), false);
  const empty = await inProcess({ command: 'list' }, env(d));
  assert.match(empty.stdout, /^no models pulled yet; e.g. portico models pull hf:Qwen\/Qwen2.5-0.5B-Instruct-GGUF\n$/);
  const gone = await inProcess({ command: 'rm', name: 'tiny-chat:q4_k_m' }, env(d));
  assert.equal(gone.code, 1);
  assert.equal(gone.stderr, 'portico: no pulled model is called "tiny-chat:q4_k_m"; pulled: (none)\n');
});

test('MODELS_DIR puts models elsewhere; bad usage and bad references exit 2 with a message, no stack', async () => {
  const d = home();
  const elsewhere = join(d, 'elsewhere');
  const r = await inProcess({ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF' }, env(d, { MODELS_DIR: elsewhere }));
  assert.equal(r.code, 0, r.stderr);
  assert.ok(existsSync(join(elsewhere, 'models.json')));
  assert.equal(existsSync(join(d, 'models')), false);
  // what the models layer refuses (the reference, the name, the settings): exit 2, one line
  const refused: Array<[ModelsCommand, Record<string, string>, RegExp]> = [
    [{ command: 'pull', ref: 'qwen' }, {}, /^portico: "qwen" is not a model reference: unknown form; use hf:<owner>\/<repo>\[:<quant>\]/],
    [{ command: 'pull', ref: 'Qwen/Qwen2.5-0.5B-Instruct-GGUF' }, {}, /did you mean hf:Qwen\/Qwen2.5-0.5B-Instruct-GGUF\?/],
    [{ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF', name: 'two words' }, {}, /^portico: "two words" is not a usable model name/],
    [{ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF', name: '' }, {}, /^portico: "" is not a usable model name/],
    [{ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF', sha256: 'abc' }, {}, /^portico: --sha256 must be 64 hexadecimal digits/],
    [{ command: 'pull', ref: 'hf:a/b' }, { PORTICO_HF_ENDPOINT: 'not-a-url' }, /^portico: PORTICO_HF_ENDPOINT is not a valid URL/],
  ];
  for (const [cmd, extra, re] of refused) {
    const res = await inProcess(cmd, env(d, extra));
    assert.equal(res.code, 2, `${JSON.stringify(cmd)}: ${res.stderr}`);
    assert.match(res.stderr, re, JSON.stringify(cmd));
    assert.equal(res.stderr.trim().split('\n').length, 1, `one line: ${res.stderr}`);
  }
  // what the command line refuses (commander, the one parser): exit 2, one line, before anything is opened
  const bad: Array<[string[], RegExp]> = [
    [['models', 'pull'], /error: missing required argument 'ref'/],
    [['models', 'pull', 'a', 'b'], /error: too many arguments for 'pull'/],
    [['models', 'pull', ''], /give a model reference, e\.g\. hf:Qwen\/Qwen2\.5-0\.5B-Instruct-GGUF/],
    [['models', 'pull', 'qwen'], /^portico: "qwen" is not a model reference/],
    [['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--kind', 'image'], /argument 'image' is invalid\. Allowed choices are text, embedding/],
    [['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--name'], /error: option '--name <name>' argument missing/],
    [['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--name', ''], /^portico: "" is not a usable model name/],
    [['models', 'pull', 'hf:acme/Tiny-Chat-GGUF', '--bogus'], /error: unknown option '--bogus'/],
    [['models', 'frobnicate'], /error: unknown command 'frobnicate'/],
    [['models', 'list', 'extra'], /error: too many arguments for 'list'/],
    [['models', 'list', '--yaml'], /error: unknown option '--yaml'/],
    [['models', 'rm'], /error: missing required argument 'name'/],
    [['models', 'rm', ''], /give a model name \(see portico models list\)/],
    [['models', 'rm', 'a', 'b'], /error: too many arguments for 'rm'/],
  ];
  const runs = await Promise.all(bad.map(([args]) => portico(args, env(d))));
  runs.forEach((r, i) => {
    const [args, re] = bad[i]!;
    assert.equal(r.code, 2, `portico ${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, re, `portico ${args.join(' ')}`);
    assert.equal(
      r.stderr
        .trim()
        .split('\n')
        .filter((l) => !/^\(Did you mean/.test(l)).length,
      1,
      `portico ${args.join(' ')}: one line, got ${JSON.stringify(r.stderr)}`,
    );
    assert.ok(!/\n\s+at /.test(r.stderr), 'no stack trace');
    assert.equal(r.stdout, '');
  });
  assert.deepEqual(tree(join(d, 'models')), [], 'nothing was pulled or written by a refused command');
  // help: exit 0, the reference forms and the settings
  const [help, pullHelp] = await Promise.all([portico(['models', 'help'], env(d)), portico(['models', 'pull', '--help'], env(d))]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /Usage: portico models/);
  assert.match(help.stdout, /pull \[options\] <ref>/);
  assert.match(help.stdout, /Settings: MODELS_DIR \(default DATA_DIR\/models\), HF_TOKEN, PORTICO_HF_ENDPOINT/);
  assert.equal(pullHelp.code, 0, pullHelp.stderr);
  assert.match(pullHelp.stdout, /whisper:<name> {2,}a whisper\.cpp model/);
});

test('HF_TOKEN (from the environment) opens a gated repository and is never printed; without it the message says what to do', async () => {
  const d = home();
  const without = await inProcess({ command: 'pull', ref: 'hf:acme/Gated-GGUF' }, env(d));
  assert.equal(without.code, 1);
  assert.match(without.stderr, /portico: hf:acme\/Gated-GGUF\/gated-Q4_K_M.gguf is gated: accept its conditions at http:\/\/127.0.0.1:\d+\/acme\/Gated-GGUF and set HF_TOKEN/);
  const wrong = await inProcess({ command: 'pull', ref: 'hf:acme/Gated-GGUF' }, env(d, { HF_TOKEN: 'hf_wrong_but_secret' }));
  assert.equal(wrong.code, 1);
  assert.ok(!(wrong.stdout + wrong.stderr).includes('hf_wrong_but_secret'));
  const ok = await inProcess({ command: 'pull', ref: 'hf:acme/Gated-GGUF' }, env(d, { HF_TOKEN: TOKEN }));
  assert.equal(ok.code, 0, ok.stderr);
  assert.ok(!(ok.stdout + ok.stderr).includes(TOKEN), 'the token is not printed');
  assert.ok(!readFileSync(join(d, 'models', 'models.json'), 'utf8').includes(TOKEN), 'nor stored');
});

test('no way to the hub (offline, a firewall): the error names the way forward: a mirror, a reachable URL, or a local file', async () => {
  // a port nothing listens on: the connection is refused, as when the hub cannot be reached
  const closed = await new Promise<number>((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
  const d = home();
  const viaHub = await inProcess({ command: 'pull', ref: 'hf:acme/Tiny-Chat-GGUF' }, env(d, { PORTICO_HF_ENDPOINT: `http://127.0.0.1:${closed}` }));
  assert.equal(viaHub.code, 1);
  assert.match(viaHub.stderr, new RegExp(`cannot reach 127\\.0\\.0\\.1:${closed}: ECONNREFUSED\\.`));
  assert.match(viaHub.stderr, /set PORTICO_HF_ENDPOINT \(or HF_ENDPOINT\) to a mirror of the hub/);
  assert.match(viaHub.stderr, /pull the file from an https:\/\/ address this machine reaches/);
  assert.match(viaHub.stderr, /copy the \.gguf here and name it in the model file \(PORTICO_CONFIG: provider llama, path/);
  // a plain URL: no mirror of the hub to offer, the other two ways
  const plain = await inProcess({ command: 'pull', ref: `http://127.0.0.1:${closed}/files/model.gguf` }, env(d));
  assert.equal(plain.code, 1);
  assert.match(plain.stderr, /cannot reach .*ECONNREFUSED/);
  assert.ok(!/mirror/.test(plain.stderr), plain.stderr);
  assert.match(plain.stderr, /name it in the model file/);
  assert.ok(!/\n\s+at /.test(viaHub.stderr + plain.stderr), 'no stack');
});

test('a full disk (writes fail with ENOSPC): a clear error, exit 1, no crash, nothing left behind', async () => {
  const d = home();
  const models = join(d, 'models');
  const r = await portico(['models', 'pull', 'hf:acme/Big-GGUF'], env(d, { PORTICO_TEST_ENOSPC_DIR: models, PORTICO_TEST_ENOSPC_AFTER: '6000000' }), ['--import', ENOSPC]);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /^portico: the disk is full \(ENOSPC\) while writing the model; free some space \(or point MODELS_DIR at a larger disk\) and pull again$/m);
  assert.ok(!/\n\s+at /.test(r.stderr), `no stack trace: ${r.stderr}`);
  assert.equal(r.stdout, '');
  assert.deepEqual(tree(models), [], 'no partial file, no model, no catalogue entry');
});

test('a transfer that stalls (the connection stays open, nothing arrives) is cut and resumed; one that keeps stalling gives up, keeping the part', async () => {
  const d = home();
  // one ranged transfer sends 1000 bytes, then nothing, and never ends: the pull must not wait for it forever
  let stalls = 0;
  hub.faults.stall = (start) => start > 0 && stalls++ === 0;
  try {
    const r = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(d, { PORTICO_PULL_STALL_MS: STALL_MS }));
    assert.equal(r.code, 0, r.stderr);
    assert.equal(stalls >= 2, true, 'the stalled range was asked for again');
    assert.match(r.stderr, /nothing arrived for \S+ at [\d.]+ [kM]?B of [\d.]+ MB; the transfer is cut and resumed \(try 2 of 4\)/);
    assert.ok(readFileSync(join(d, 'models', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf')).equals(big), 'the file is whole');
  } finally {
    hub.faults.stall = undefined;
  }
  // every ranged transfer stalls: after the retries, a clear error; the part downloaded so far stays for a resume
  const d2 = home();
  hub.faults.stall = (start) => start > 0;
  try {
    const r = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(d2, { PORTICO_PULL_STALL_MS: STALL_MS }));
    assert.equal(r.code, 1, r.stderr);
    assert.match(
      r.stderr,
      /portico: the transfer stalled: nothing arrived for 1 s, 4 times; the part downloaded so far is kept: run the same command again to resume \(PORTICO_PULL_STALL_MS sets the wait\)/,
    );
    assert.equal((r.stderr.match(/the transfer is cut and resumed/g) ?? []).length, 3);
    assert.ok(
      existsSync(join(d2, 'models', '.partial', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf.ipull')),
      `the partial file stays: ${JSON.stringify(tree(join(d2, 'models')))} ${r.stderr}`,
    );
    assert.equal(existsSync(join(d2, 'models', 'models.json')), false, 'nothing served');
  } finally {
    hub.faults.stall = undefined;
  }
  // a bad setting is refused with its name
  const bad = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(home(), { PORTICO_PULL_STALL_MS: 'soon' }));
  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /PORTICO_PULL_STALL_MS must be a whole number of milliseconds/);
});

test('Ctrl-C stops a pull (exit 130) keeping the partial file; the same command resumes it', async () => {
  const d = home();
  hub.faults.stall = (start) => start > 0;
  const child = spawn(process.execPath, [CLI, 'models', 'pull', 'hf:acme/Big-GGUF'], { env: env(d) });
  let stderr = '';
  child.stderr.on('data', (b) => (stderr += b));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const partial = join(d, 'models', '.partial', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf.ipull');
  // the first 5 MB chunk is written, the other ranges stall: then interrupt
  const end = Date.now() + 20_000;
  while (!(existsSync(partial) && statSync(partial).size >= 5_242_880) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  child.kill('SIGINT');
  const code = await exited;
  hub.faults.stall = undefined;
  assert.equal(code, 130, stderr);
  assert.match(stderr, /portico: stopped; the part downloaded so far is kept: run the same command again to resume/);
  assert.ok(existsSync(partial), 'the partial file stays');
  assert.equal(existsSync(join(d, 'models', 'models.json')), false, 'nothing served');
  const again = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(d));
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stderr, /, resuming at \d+\.\d MB/);
  assert.ok(readFileSync(join(d, 'models', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf')).equals(big));
  assert.deepEqual(tree(join(d, 'models')), ['hf/acme/Big-GGUF/big-Q4_K_M.gguf', 'models.json']);
});

test('a resumed pull says how much was really downloaded before (not the partial file size), and ends with the right file', async () => {
  const d = home();
  const CHUNK = 5 * 1024 * 1024; // ipull's chunks
  const have = 2 * CHUNK;
  const blob = `/cdn/${sha256(big)}`;
  hub.requests.length = 0;
  // the hub gives the first `have` bytes of the file, then nothing more: the pull stalls, retries, and gives up
  hub.faults.onlyBelow = have;
  try {
    const r = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(d, { PORTICO_PULL_STALL_MS: STALL_MS }));
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /the part downloaded so far is kept/);
  } finally {
    hub.faults.onlyBelow = undefined;
  }
  // what arrived: the distinct bytes of the file the ranged transfers sent (not the 16-byte look at its head)
  const received = hub.distinctBytesSent(
    blob,
    hub.requests.filter((q) => q.range !== 'bytes=0-15'),
  );
  assert.equal(received, have);
  const r = await inProcess({ command: 'pull', ref: 'hf:acme/Big-GGUF' }, env(d, { PORTICO_PULL_STALL_MS: STALL_MS }));
  assert.equal(r.code, 0, r.stderr);
  const line = r.stderr.split('\n').find((l) => l.startsWith('pulling '));
  assert.ok(line?.endsWith(`, resuming at ${formatBytes(received)}`), `the resume names the ${received} bytes received: ${line}`);
  assert.equal(formatBytes(received), '10.5 MB');
  const file = join(d, 'models', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf');
  assert.equal(sha256(readFileSync(file)), sha256(big), 'the resumed file is the model');
});
