// The runtime (src/compose/runtime.ts): what it has ready before the first request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';

test("an upstream model's engine code (undici's included) is loaded when the runtime is built, before any request", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portico-preload-'));
  const script = join(dir, 'run.mjs');
  const src = (p: string) => JSON.stringify(new URL(`../../src/${p}`, import.meta.url).href);
  // a process of its own: nothing else loaded undici before
  writeFileSync(
    script,
    `import { createRequire } from 'node:module';
import { createCore } from ${src('compose/core.js')};
import { createRuntime } from ${src('compose/runtime.js')};
import { loadConfig } from ${src('platform/config.js')};
const loaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/node_modules/undici/'));
const before = loaded();
const config = loadConfig({ DATA_DIR: ${JSON.stringify(dir)}, PORTICO_DB: 'memory', JWT_SECRET: 'x'.repeat(40), LOG_LEVEL: 'silent' });
const core = await createCore(config, { role: 'serve', models: [{ name: 'm', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', type: 'text' }] });
const runtime = await createRuntime(core, { pulledModels: false, builtinModels: false });
console.log(JSON.stringify({ before, after: loaded() }));
await runtime.close();
await core.close();
`,
  );
  try {
    const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
    let out = '';
    let errOut = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (errOut += d));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    assert.equal(code, 0, errOut);
    assert.deepEqual(JSON.parse(out.trim().split('\n').pop()!), { before: false, after: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
