/**
 * `pullModel` against a local server that answers like the Hugging Face hub (test/helpers/fake-hub.ts): nothing
 * here reaches the internet. Covers resolution, download through node-llama-cpp, verification, the catalogue,
 * resume, and every refusal leaving nothing behind.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { FakeHub, sha256, type FakeHubRepo } from '../helpers/fake-hub.js';
import { makeTinyGguf } from '../helpers/tiny-gguf.js';
import { stallWatch, waitFor } from '../helpers/wait.js';
import { encodeGguf, str, u32 } from '../helpers/gguf-writer.js';
import { pullModel, type PullEvent, type PullOptions } from '../../src/models/pull/pull.js';
import { ModelCatalogue } from '../../src/models/pull/catalogue.js';
import { PullError } from '../../src/models/pull/errors.js';
import { createLlamaEngine } from '../../src/engines/llama/index.js';

const GOOD = 'hf_good_token_123456';
const OTHER = 'hf_other_token_654321';
let hub: FakeHub;
let tiny: Buffer;
let tiny2: Buffer;
let big: Buffer;
let bigPath: string;
const dirs: string[] = [];

function modelsDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'portico-pull-'));
  dirs.push(d);
  return d;
}

/** every file under dir, relative, sorted */
function tree(dir: string): string[] {
  const out: string[] = [];
  (function walk(d: string) {
    for (const n of readdirSync(d)) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  })(dir);
  return out.sort();
}

function opts(dir: string, extra: Partial<PullOptions> = {}): PullOptions {
  return { modelsDir: dir, hubEndpoint: hub.url, ...extra };
}

async function refused(p: Promise<unknown>, code: string, re: RegExp): Promise<PullError> {
  let err: unknown;
  await assert.rejects(p, (e: unknown) => {
    err = e;
    assert.ok(e instanceof PullError, `a PullError, got ${(e as Error)?.stack}`);
    assert.equal(e.code, code, e.message);
    assert.match(e.message, re);
    return true;
  });
  return err as PullError;
}

function ggml(size: number): Buffer {
  const b = Buffer.alloc(size, 7);
  b.writeUInt32LE(0x67676d6c, 0);
  return b;
}

before(async () => {
  tiny = readFileSync(await makeTinyGguf());
  tiny2 = readFileSync(await makeTinyGguf({ seed: 2 }));
  // over 15 MB: node-llama-cpp (ipull) fetches and resumes in 5 MB chunks, so resume needs several
  bigPath = await makeTinyGguf({ nEmbd: 256, nLayer: 4, nFf: 1024 });
  big = readFileSync(bigPath);
  const embedding = encodeGguf(
    [
      ['general.architecture', str('bert')],
      ['general.name', str('tiny-embed')],
      ['general.alignment', u32(32)],
      ['bert.pooling_type', u32(1)],
    ],
    [],
  );
  const qwen3Embedding = encodeGguf(
    [
      ['general.architecture', str('qwen3')],
      ['qwen3.pooling_type', u32(3)],
    ],
    [],
  );
  const corrupt = Buffer.from(tiny);
  corrupt[corrupt.length - 100] ^= 0xff;
  hub = await new FakeHub([GOOD, OTHER]).start();
  const repos: FakeHubRepo[] = [
    {
      owner: 'acme',
      repo: 'Tiny-Chat-GGUF',
      files: [
        { path: 'README.md', data: Buffer.from('# tiny') },
        { path: 'tiny-chat-q4_k_m.gguf', data: tiny },
        { path: 'tiny-chat-q8_0.gguf', data: tiny2 },
        { path: 'mmproj-tiny-f16.gguf', data: Buffer.from('GGUF....') },
      ],
    },
    { owner: 'other', repo: 'Tiny-Chat-GGUF', files: [{ path: 'tiny-chat-q4_k_m.gguf', data: tiny2 }] },
    { owner: 'acme', repo: 'Big-GGUF', files: [{ path: 'big-Q4_K_M.gguf', data: big }] },
    {
      owner: 'acme',
      repo: 'safetensors-only',
      files: [
        { path: 'config.json', data: Buffer.from('{}') },
        { path: 'model.safetensors', data: Buffer.from('x'), lfs: true },
      ],
    },
    { owner: 'acme', repo: 'Gated-GGUF', gated: true, grantedTokens: [GOOD], files: [{ path: 'gated-Q4_K_M.gguf', data: tiny }] },
    { owner: 'acme', repo: 'Private-GGUF', private: true, files: [{ path: 'private-Q4_K_M.gguf', data: tiny }] },
    {
      owner: 'ggerganov',
      repo: 'whisper.cpp',
      files: [
        { path: 'ggml-base.en.bin', data: ggml(64 * 1024) },
        { path: 'ggml-tiny.bin', data: tiny },
      ],
    },
    {
      owner: 'acme',
      repo: 'Embed-GGUF',
      files: [
        { path: 'tiny-embed-f16.gguf', data: embedding },
        { path: 'qwen3-embedding-Q8_0.gguf', data: qwen3Embedding },
      ],
    },
    { owner: 'acme', repo: 'Corrupt-GGUF', files: [{ path: 'c-Q4_K_M.gguf', data: corrupt, announceSha256: sha256(tiny) }] },
    { owner: 'acme', repo: 'Short-GGUF', files: [{ path: 's-Q4_K_M.gguf', data: tiny, announceSize: tiny.length + 10 }] },
    { owner: 'acme', repo: 'Html-GGUF', files: [{ path: 'page-Q4_K_M.gguf', data: Buffer.from('<!DOCTYPE html><html><body>Sign in</body></html>') }] },
    {
      owner: 'acme',
      repo: 'Split-GGUF',
      files: [
        { path: 'x-Q4_K_M-00001-of-00002.gguf', data: tiny },
        { path: 'x-Q4_K_M-00002-of-00002.gguf', data: tiny },
      ],
    },
  ];
  for (const r of repos) hub.addRepo(r);
});

after(async () => {
  await hub?.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('pull from the hub', () => {
  test('hf:<owner>/<repo> takes the Q4_K_M GGUF, verifies it, catalogues it, and node-llama-cpp runs it', async () => {
    const dir = modelsDir();
    const events: PullEvent[] = [];
    hub.requests.length = 0;
    const r = await pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { onEvent: (e) => events.push(e) }));
    assert.equal(r.status, 'pulled');
    const m = r.model;
    assert.equal(m.name, 'tiny-chat:q4_k_m');
    assert.deepEqual(m.aliases, []);
    assert.equal(m.kind, 'text');
    assert.equal(m.format, 'gguf');
    assert.equal(m.architecture, 'llama');
    assert.equal(m.size, tiny.length);
    assert.equal(m.sha256, sha256(tiny));
    assert.equal(m.file, 'hf/acme/Tiny-Chat-GGUF/tiny-chat-q4_k_m.gguf');
    assert.equal(m.path, join(dir, 'hf/acme/Tiny-Chat-GGUF/tiny-chat-q4_k_m.gguf'));
    assert.equal(m.source.repo, 'acme/Tiny-Chat-GGUF');
    assert.match(m.source.revision!, /^[0-9a-f]{40}$/);
    assert.equal(m.source.url, `${hub.url}/acme/Tiny-Chat-GGUF/resolve/${m.source.revision}/tiny-chat-q4_k_m.gguf`);
    assert.ok(readFileSync(m.path).equals(tiny));
    assert.deepEqual(tree(dir), ['hf/acme/Tiny-Chat-GGUF/tiny-chat-q4_k_m.gguf', 'models.json'], 'no partial files, no locks left');
    // the catalogue on disk says the same
    const listed = await new ModelCatalogue(dir).list();
    assert.deepEqual(listed, [m]);
    // the hub was asked the documented way: model API, then the file at the listed commit (302 -> CDN, ranges)
    assert.ok(hub.requestsTo('/api/models/acme/Tiny-Chat-GGUF/revision/main').length === 1);
    assert.ok(hub.requestsTo(`/acme/Tiny-Chat-GGUF/resolve/${m.source.revision}/tiny-chat-q4_k_m.gguf`).every((q) => q.status === 302));
    assert.ok(hub.requestsTo(`/cdn/${sha256(tiny)}`).some((q) => q.status === 206));
    assert.deepEqual([...new Set(events.map((e) => e.type))], ['resolving', 'resolved', 'progress', 'verifying', 'done']);
    const last = events.filter((e) => e.type === 'progress').pop() as Extract<PullEvent, { type: 'progress' }>;
    assert.deepEqual([last.downloaded, last.total], [tiny.length, tiny.length]);
    // the pulled file is a model node-llama-cpp loads and generates with
    const engine = await createLlamaEngine({ path: m.path, contextSize: 256, parallel: 1, threads: 1 });
    try {
      let text = '';
      let done: any;
      for await (const ev of engine.generate({ model: m.name, messages: [{ role: 'user', content: 'Hello' }], maxOutputTokens: 8, temperature: 0 })) {
        if (ev.type === 'text_delta') text += ev.delta;
        if (ev.type === 'done') done = ev;
      }
      assert.ok(text.length > 0, 'generated text');
      assert.equal(done.usage.outputTokens, 8);
    } finally {
      await engine.close();
    }
  });

  test('a quantization, --name as an extra name, pulling again is a no-op that can add a name, rm by alias then by name', async () => {
    const dir = modelsDir();
    const a = await pullModel('hf:acme/Tiny-Chat-GGUF:q8_0', opts(dir, { name: 'chat' }));
    assert.equal(a.model.name, 'tiny-chat:q8_0');
    assert.deepEqual(a.model.aliases, ['chat']);
    assert.ok(readFileSync(a.model.path).equals(tiny2));
    hub.requests.length = 0;
    const again = await pullModel('hf:acme/Tiny-Chat-GGUF:Q8_0', opts(dir, { name: 'chat2' }));
    assert.equal(again.status, 'present');
    assert.deepEqual(again.model.aliases, ['chat', 'chat2']);
    assert.deepEqual(
      hub.requestsTo('/cdn/').map((q) => q.range),
      ['bytes=0-15'],
      'nothing downloaded again: one look at the head (for the checksum)',
    );
    // a name another model has is refused before anything is fetched
    hub.requests.length = 0;
    await refused(pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { name: 'chat' })), 'name_taken', /"chat" is taken by tiny-chat:q8_0/);
    assert.deepEqual(
      hub.requestsTo('/cdn/').map((q) => q.range),
      ['bytes=0-15'],
    );
    await refused(pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { name: 'bad name' })), 'bad_name', /not a usable model name/);
    const cat = new ModelCatalogue(dir);
    const rmAlias = await cat.remove('chat');
    assert.equal(rmAlias.removed, 'alias');
    assert.ok(existsSync(a.model.path), 'removing an alias keeps the file');
    assert.deepEqual((await cat.find('tiny-chat:q8_0'))!.aliases, ['chat2']);
    const rmModel = await cat.remove('tiny-chat:q8_0');
    assert.equal(rmModel.removed, 'model');
    assert.equal(existsSync(a.model.path), false);
    assert.deepEqual(tree(dir), ['models.json'], 'the folders the pull made are gone too');
    assert.deepEqual(await cat.list(), []);
    await refused(cat.remove('tiny-chat:q8_0'), 'unknown_model', /no pulled model is called "tiny-chat:q8_0"; pulled: \(none\)/);
  });

  test('the same default name from another repository gets the owner in front', async () => {
    const dir = modelsDir();
    const a = await pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir));
    const b = await pullModel('hf:other/Tiny-Chat-GGUF', opts(dir));
    assert.equal(a.model.name, 'tiny-chat:q4_k_m');
    assert.equal(b.model.name, 'other/tiny-chat:q4_k_m');
    assert.notEqual(a.model.path, b.model.path);
    assert.deepEqual(
      (await new ModelCatalogue(dir).list()).map((m) => m.name),
      ['tiny-chat:q4_k_m', 'other/tiny-chat:q4_k_m'],
    );
  });

  test('hf:<owner>/<repo>/<file>, a hub URL and a plain URL', async () => {
    const dir = modelsDir();
    const f = await pullModel('hf:acme/Tiny-Chat-GGUF/tiny-chat-q8_0.gguf', opts(dir));
    assert.equal(f.model.name, 'tiny-chat:q8_0');
    assert.equal(f.model.sha256, sha256(tiny2));
    const viaUrl = await pullModel(`${hub.url}/acme/Tiny-Chat-GGUF/blob/main/tiny-chat-q8_0.gguf`, opts(dir));
    assert.equal(viaUrl.status, 'present', 'a hub URL is the same file as the hf: reference');
    const url = hub.addStatic('my-model.Q4_0.gguf', tiny);
    const plain = await pullModel(url, opts(dir));
    assert.equal(plain.model.name, 'my-model:q4_0');
    assert.equal(plain.model.file, `url/127.0.0.1_${new URL(hub.url).port}/my-model.Q4_0.gguf`);
    assert.equal(plain.model.sha256, sha256(tiny));
    assert.equal(plain.model.sha256, sha256(tiny), 'computed when the server announces none');
    assert.equal(plain.model.source.url, url);
    // --sha256 for a server that announces none: a wrong one is refused after the download, leaving nothing
    const url2 = hub.addStatic('other.gguf', tiny2);
    await refused(pullModel(url2, opts(dir, { sha256: 'a'.repeat(64) })), 'verification_failed', /SHA-256 of the download is [0-9a-f]{64}, the hub announced a{64}/);
    await refused(pullModel(url2, opts(dir, { sha256: 'xyz' })), 'bad_ref', /--sha256 must be 64 hexadecimal digits/);
    assert.deepEqual(
      tree(dir).filter((p) => !p.endsWith('.json')),
      ['hf/acme/Tiny-Chat-GGUF/tiny-chat-q8_0.gguf', `url/127.0.0.1_${new URL(hub.url).port}/my-model.Q4_0.gguf`],
    );
  });

  test('whisper:<name> pulls a whisper.cpp ggml model as a transcription model; a GGUF there is refused', async () => {
    const dir = modelsDir();
    const w = await pullModel('whisper:base.en', opts(dir));
    assert.equal(w.model.name, 'whisper-base.en');
    assert.equal(w.model.kind, 'transcription');
    assert.equal(w.model.format, 'ggml');
    assert.equal(w.model.file, 'hf/ggerganov/whisper.cpp/ggml-base.en.bin');
    assert.equal(w.model.architecture, undefined);
    const same = await pullModel('hf:ggerganov/whisper.cpp/ggml-base.en.bin', opts(dir));
    assert.equal(same.status, 'present');
    await refused(pullModel('whisper:tiny', opts(dir)), 'not_a_model', /is not a whisper.cpp ggml model: it starts with "GGUF/);
    await refused(pullModel('whisper:huge-v9', opts(dir)), 'not_found', /whisper.cpp has no model "huge-v9" .* it has tiny, tiny.en, base, base.en, small/);
    await refused(pullModel('whisper:base.en', opts(dir, { kind: 'text' })), 'bad_ref', /is a whisper.cpp model \(transcription\); --kind text applies to GGUF models/);
  });

  test('embedding GGUFs are recognised (encoder architecture, or a pooling type); --kind overrides', async () => {
    const dir = modelsDir();
    const e = await pullModel('hf:acme/Embed-GGUF/tiny-embed-f16.gguf', opts(dir));
    assert.equal(e.model.kind, 'embedding');
    assert.equal(e.model.architecture, 'bert');
    assert.equal(e.model.name, 'tiny-embed:f16');
    const q = await pullModel('hf:acme/Embed-GGUF:Q8_0', opts(dir));
    assert.equal(q.model.kind, 'embedding');
    assert.equal(q.model.architecture, 'qwen3');
    const forced = await pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { kind: 'embedding' }));
    assert.equal(forced.model.kind, 'embedding');
    const back = await pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { kind: 'text' }));
    assert.equal(back.status, 'present');
    assert.equal(back.model.kind, 'text');
  });
});

describe('access: HF_TOKEN for gated and private repositories, and it goes nowhere else', () => {
  test('gated: 401 without a token, 403 with an account that has no access, works with one that has', async () => {
    const dir = modelsDir();
    await refused(
      pullModel('hf:acme/Gated-GGUF', opts(dir)),
      'unauthorized',
      /hf:acme\/Gated-GGUF\/gated-Q4_K_M.gguf is gated: accept its conditions at http:\/\/127.0.0.1:\d+\/acme\/Gated-GGUF and set HF_TOKEN/,
    );
    await refused(pullModel('hf:acme/Gated-GGUF', opts(dir, { token: OTHER })), 'forbidden', /refused access to .* \(403\): if the repository is gated, accept its conditions/);
    const bad = await refused(pullModel('hf:acme/Gated-GGUF', opts(dir, { token: 'hf_wrong_secret_value' })), 'unauthorized', /refused HF_TOKEN/);
    assert.ok(!bad.message.includes('hf_wrong_secret_value'), 'the token is not in the message');
    assert.deepEqual(tree(dir), [], 'nothing made by refusals');
    hub.requests.length = 0;
    const ok = await pullModel('hf:acme/Gated-GGUF', opts(dir, { token: GOOD }));
    assert.equal(ok.model.name, 'gated:q4_k_m');
    assert.ok(!readFileSync(join(dir, 'models.json'), 'utf8').includes(GOOD), 'the token is not stored');
    // sent to the hub (and, by node-llama-cpp, to where the hub redirects: here the same host), to nothing else
    assert.ok(hub.requests.some((q) => q.authorization === `Bearer ${GOOD}` && q.path.startsWith('/acme/Gated-GGUF/resolve/')));
  });

  test('private: the hub answers 401 as for a repository that does not exist; the token opens it', async () => {
    const dir = modelsDir();
    await refused(
      pullModel('hf:acme/Private-GGUF', opts(dir)),
      'unauthorized',
      /wants a token for hf:acme\/Private-GGUF \(401\): it is gated or private, or does not exist. If it exists, set HF_TOKEN/,
    );
    const ok = await pullModel('hf:acme/Private-GGUF', opts(dir, { token: GOOD }));
    assert.equal(ok.model.name, 'private:q4_k_m');
  });

  test('a plain URL on another host never gets the token', async () => {
    const dir = modelsDir();
    // "localhost" is another host name than the hub's 127.0.0.1 (node-llama-cpp offers the token by host name)
    const other = await new FakeHub([], 'localhost').start();
    try {
      const url = other.addStatic('m-Q4_K_M.gguf', tiny);
      await pullModel(url, opts(dir, { token: GOOD }));
      assert.ok(other.requests.length > 0);
      assert.ok(other.requests.every((q) => q.authorization === undefined));
    } finally {
      await other.close();
    }
  });
});

describe('bad input and failures leave nothing half-made', () => {
  test('unknown repository, revision, file and quantization; a repository without GGUF; a split model', async () => {
    const dir = modelsDir();
    await refused(pullModel('hf:acme/Nope-GGUF', opts(dir, { token: GOOD })), 'not_found', /hf:acme\/Nope-GGUF: no such repository on 127.0.0.1:\d+/);
    await refused(pullModel('hf:acme/Nope-GGUF', opts(dir)), 'unauthorized', /it is gated or private, or does not exist/);
    await refused(pullModel('hf:acme/Tiny-Chat-GGUF#v9', opts(dir)), 'not_found', /no such revision/);
    await refused(pullModel('hf:acme/Tiny-Chat-GGUF/missing.gguf', opts(dir)), 'not_found', /hf:acme\/Tiny-Chat-GGUF\/missing.gguf: no such file/);
    await refused(pullModel('hf:acme/Tiny-Chat-GGUF:Q2_K', opts(dir)), 'no_gguf', /has no Q2_K GGUF; it has: Q4_K_M, Q8_0/);
    await refused(pullModel('hf:acme/safetensors-only', opts(dir)), 'no_gguf', /hf:acme\/safetensors-only has no GGUF file \(it has config.json, model.safetensors\)/);
    await refused(pullModel('hf:acme/Split-GGUF', opts(dir)), 'split_unsupported', /part 1 of a model split into 2 files/);
    await refused(pullModel('nonsense', opts(dir)), 'bad_ref', /unknown form/);
    assert.deepEqual(tree(dir), []);
  });

  test('a file that is not a GGUF (an HTML page) is refused before it is downloaded', async () => {
    const dir = modelsDir();
    hub.requests.length = 0;
    await refused(pullModel('hf:acme/Html-GGUF', opts(dir)), 'not_a_model', /page-Q4_K_M.gguf is not a GGUF model \(or a whisper.cpp ggml model\): it is an HTML\/XML page/);
    const url = hub.addStatic('weights.bin', Buffer.from('PK\x03\x04 a pytorch zip'));
    await refused(pullModel(url, opts(dir)), 'not_a_model', /weights.bin is not a GGUF model .*: it is a ZIP archive/);
    assert.ok(
      hub.requestsTo('/cdn/').every((q) => q.range === 'bytes=0-15'),
      'only the first bytes were asked for',
    );
    assert.deepEqual(tree(dir), []);
  });

  test('a corrupted byte fails the SHA-256 check; a short file fails the size check; nothing is kept', async () => {
    const dir = modelsDir();
    await refused(
      pullModel('hf:acme/Corrupt-GGUF', opts(dir)),
      'verification_failed',
      new RegExp(`SHA-256 of the download is [0-9a-f]{64}, the hub announced ${sha256(tiny)}; the file was corrupted`),
    );
    await refused(pullModel('hf:acme/Short-GGUF', opts(dir)), 'verification_failed', new RegExp(`the download has ${tiny.length} bytes, the hub announced ${tiny.length + 10}`));
    assert.deepEqual(tree(dir), [], 'no model file, no partial file, no catalogue entry');
  });

  test('not enough disk space: refused up front from the free space, nothing left', async () => {
    const dir = modelsDir();
    hub.requests.length = 0;
    await refused(
      pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir, { freeBytes: async () => 1000 })),
      'disk_full',
      /not enough disk space for .* it needs \d+\.\d KB more, 1.0 KB is free/,
    );
    assert.equal(hub.requestsTo('/cdn/').filter((q) => q.range !== 'bytes=0-15').length, 0, 'no download started');
    assert.deepEqual(tree(dir), []);
  });
});

describe('resume', () => {
  test('a connection cut midway is resumed with a Range request from where the chunk stopped, not from 0', async () => {
    const dir = modelsDir();
    hub.requests.length = 0;
    hub.faults.cutAfterBytes = 1_500_000;
    const r = await pullModel('hf:acme/Big-GGUF', opts(dir));
    assert.equal(hub.faults.cutAfterBytes, undefined, 'the cut happened');
    assert.equal(r.model.sha256, sha256(big));
    const ranged = hub.requestsTo(`/cdn/${sha256(big)}`).filter((q) => q.range && q.range !== 'bytes=0-15');
    const starts = ranged.map((q) => Number(/bytes=(\d+)-/.exec(q.range!)![1]));
    const cut = ranged.findIndex((q) => q.sent === 1_500_000);
    assert.ok(cut >= 0, 'one transfer was cut');
    const retried = starts.slice(cut + 1);
    assert.ok(retried.includes(starts[cut]), `the cut range was asked again from its start (${starts[cut]}), with a Range header`);
    const served = ranged.reduce((n, q) => n + q.sent, 0);
    assert.ok(served < big.length + 5_300_000, `at most the cut chunk fetched twice (${served} bytes for ${big.length})`);
  });

  test('an interrupted pull keeps its partial file (never served); the next pull fetches only what is missing', async () => {
    const dir = modelsDir();
    const ac = new AbortController();
    hub.requests.length = 0;
    // the first 5 MB chunk arrives, the other two ranges stall after 1000 bytes each; stop once the whole first
    // chunk is in (node-llama-cpp writes whole chunks)
    hub.faults.stall = (start) => start > 0;
    const blob = `/cdn/${sha256(big)}`;
    const first = pullModel('hf:acme/Big-GGUF', opts(dir, { signal: ac.signal, onEvent: (e) => e.type === 'progress' && e.downloaded >= 5_242_880 + 2000 && ac.abort() }));
    const err = await refused(first, 'interrupted', /the part downloaded so far is kept: run the same command again to resume/);
    assert.equal(err.resumable, true);
    hub.faults.stall = undefined;
    const left = tree(dir);
    assert.deepEqual(left, ['.partial/hf/acme/Big-GGUF/big-Q4_K_M.gguf.ipull'], 'only the partial file, and nothing catalogued');
    assert.deepEqual(await new ModelCatalogue(dir).list(), []);
    const firstRun = hub.requests.length;
    const events: PullEvent[] = [];
    const r = await pullModel('hf:acme/Big-GGUF', opts(dir, { onEvent: (e) => events.push(e) }));
    assert.equal(r.model.sha256, sha256(big));
    const resolved = events.find((e) => e.type === 'resolved') as Extract<PullEvent, { type: 'resolved' }>;
    assert.ok(resolved.resumeFrom > 5_000_000, 'reported as a resume');
    const second = hub.requests.slice(firstRun).filter((q) => q.path === blob && q.range && q.range !== 'bytes=0-15');
    assert.ok(second.length > 0);
    assert.ok(
      second.every((q) => !q.range!.startsWith('bytes=0-')),
      `the first chunk was not fetched again: ${second.map((q) => q.range).join(' ')}`,
    );
    assert.deepEqual(tree(dir), ['hf/acme/Big-GGUF/big-Q4_K_M.gguf', 'models.json']);
  });

  test('a server that takes the range requests and never answers them (no status, no headers): the pull gives up on them as stalled', async () => {
    const dir = modelsDir();
    hub.faults.noAnswer = (start) => start > 0;
    const stalls: string[] = [];
    try {
      await refused(
        pullModel('hf:acme/Big-GGUF', opts(dir, { stallMs: 800, onEvent: (e) => e.type === 'stalled' && stalls.push(JSON.stringify(e)) })),
        'interrupted',
        /stalled|no answer/,
      );
    } finally {
      hub.faults.noAnswer = undefined;
    }
    assert.notEqual(globalThis.fetch.name, 'bounded', 'the process’s fetch is given back once the pull ends');
    // the hub answers again: the same command resumes and completes
    const r = await pullModel('hf:acme/Big-GGUF', opts(dir));
    assert.equal(r.model.sha256, sha256(big));
  });

  test('a resume reports what the interrupted run received (complete from the start), not the partial file size', async () => {
    const dir = modelsDir();
    const CHUNK = 5 * 1024 * 1024; // ipull fetches, records and resumes in chunks of this size
    const have = 2 * CHUNK;
    assert.ok(big.length > have + CHUNK, 'more of the file is missing than was received');
    const blob = `/cdn/${sha256(big)}`;
    const ranged = (from: number) => hub.requests.slice(from).filter((q) => q.path === blob && q.range && q.range !== 'bytes=0-15');
    hub.requests.length = 0;
    // the hub gives the bytes before `have` (to whichever transfer asks, in whatever order), then nothing more
    hub.faults.onlyBelow = have;
    try {
      // the hub sends nothing more, so each try waits the stall out: 1 s (10 MB from a local server come in far less)
      await refused(pullModel('hf:acme/Big-GGUF', opts(dir, { stallMs: 1000 })), 'interrupted', /the transfer stalled/);
    } finally {
      hub.faults.onlyBelow = undefined;
    }
    // the distinct bytes of the file that arrived (a range asked again counts once; not the 16-byte look at its head)
    const received = hub.distinctBytesSent(blob, ranged(0));
    assert.equal(received, have, 'every byte before the hub stopped arrived');
    const partial = join(dir, '.partial', 'hf', 'acme', 'Big-GGUF', 'big-Q4_K_M.gguf.ipull');
    assert.ok(statSync(partial).size > big.length, 'the partial file is longer than the whole model (its progress record follows the full size)');

    const events: PullEvent[] = [];
    const firstRun = hub.requests.length;
    const r = await pullModel('hf:acme/Big-GGUF', opts(dir, { onEvent: (e) => events.push(e) }));
    const resolved = events.find((e) => e.type === 'resolved') as Extract<PullEvent, { type: 'resolved' }>;
    assert.equal(resolved.resumeFrom, received, 'resumed at the bytes received');
    assert.equal(resolved.kept, received);
    const again = ranged(firstRun).map((q) => Number(/bytes=(\d+)-/.exec(q.range!)![1]));
    assert.ok(again.length > 0 && again.every((start) => start >= have), `only what was missing was fetched: ${again.join(' ')}`);
    assert.equal(r.model.sha256, sha256(big));
    assert.equal(sha256(readFileSync(r.model.path)), sha256(big), 'the file on disk is the model');
  });

  test('a second pull of the same file while one runs is refused (busy), and does not disturb it', async () => {
    const dir = modelsDir();
    hub.faults.stall = (start) => start > 0;
    const ac = new AbortController();
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const first = pullModel('hf:acme/Big-GGUF', opts(dir, { signal: ac.signal, onEvent: (e) => e.type === 'progress' && started() })).catch((e) => e);
    await running;
    await refused(pullModel('hf:acme/Big-GGUF', opts(dir)), 'busy', /is being pulled already \(pid \d+ on /);
    ac.abort();
    hub.faults.stall = undefined;
    assert.equal(((await first) as PullError).code, 'interrupted');
  });
});

describe('the catalogue', () => {
  test('watch: another process pulling or removing is seen at once (fs.watch), and by polling alone', async () => {
    const dir = modelsDir();
    const seen: string[][] = [];
    const polled: string[][] = [];
    const cat = new ModelCatalogue(dir);
    const w = cat.watch((c) => seen.push(c.models.map((m) => m.name)));
    const p = cat.watch((c) => polled.push(c.models.map((m) => m.name)), { pollMs: 50 });
    try {
      await waitFor(() => seen.length === 1 && polled.length === 1, { what: 'the first change seen both ways', timeoutMs: 5000 });
      assert.deepEqual(seen[0], [], 'the current (empty) list first');
      const stalls = stallWatch();
      const t0 = Date.now();
      await pullModel('hf:acme/Tiny-Chat-GGUF', opts(dir));
      await waitFor(() => seen.length === 2, { what: 'the second change seen', timeoutMs: 5000 });
      // within the pull plus a moment (plus what this process's event loop was stalled), not the 2 s poll
      const stalled = stalls.stop();
      assert.ok(Date.now() - t0 < 1500 + stalled, `seen ${Date.now() - t0} ms after the pull started (${stalled.toFixed(0)} ms of stalls)`);
      assert.deepEqual(seen[1], ['tiny-chat:q4_k_m']);
      await new ModelCatalogue(dir).remove('tiny-chat:q4_k_m');
      await waitFor(() => seen.length === 3 && polled.length === 3, { what: 'the third change seen both ways', timeoutMs: 5000 });
      assert.deepEqual(seen[2], []);
      assert.deepEqual(polled, seen);
      // a damaged file is reported, the last good list stays
      const errors: Error[] = [];
      const w2 = cat.watch(() => {}, { onError: (e) => errors.push(e), pollMs: 50 });
      writeFileSync(join(dir, 'models.json'), '{not json');
      await waitFor(() => errors.length > 0, { what: 'the error reported', timeoutMs: 5000 });
      assert.match(errors[0].message, /models.json is not valid JSON/);
      w2.close();
      await refused(cat.list(), 'catalogue_error', /is not valid JSON .* fix or delete it/);
    } finally {
      w.close();
      p.close();
    }
  });

  test('concurrent writers (two commands at once) lose no entry; a path outside the models directory is refused', async () => {
    const dir = modelsDir();
    const cat = new ModelCatalogue(dir);
    const entry = (i: number) => ({
      name: `m${i}`,
      aliases: [],
      kind: 'text' as const,
      format: 'gguf' as const,
      file: `f${i}.gguf`,
      size: 1,
      sha256: 'a'.repeat(64),
      source: { ref: 'x', url: 'x' },
      pulledAt: '',
    });
    await Promise.all(Array.from({ length: 20 }, (_, i) => new ModelCatalogue(dir).update((models) => void models.push(entry(i)))));
    assert.deepEqual((await cat.list()).map((m) => m.name).sort(), Array.from({ length: 20 }, (_, i) => `m${i}`).sort());
    assert.deepEqual(tree(dir), ['models.json'], 'no temp or lock files left');
    writeFileSync(join(dir, 'models.json'), JSON.stringify({ version: 1, models: [{ ...entry(1), file: '../../etc/passwd' }] }));
    await refused(cat.list(), 'catalogue_error', /outside/);
  });
});
