/**
 * The layers of docs/architecture.md, checked on the source: which folder may import which, no provider
 * importing another, nothing importing the composition root but the CLI, and no import cycle at all.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// compiled to dist/test: the sources are two levels up
const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : /\.ts$/.test(f) && !f.endsWith('.d.ts') ? [p] : [];
  });
}

/** file (relative to src) -> files it imports (relative to src), type-only imports included */
function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const f of sources(SRC)) {
    const deps: string[] = [];
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:import|export)\s[^'"]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g)) {
      const spec = m[1] ?? m[2]!;
      const base = resolve(dirname(f), spec).replace(/\.(js|ts)$/, '');
      const hit = [`${base}.ts`, join(base, 'index.ts')].find((c) => existsSync(c));
      if (hit) deps.push(relative(SRC, hit));
    }
    g.set(relative(SRC, f), deps);
  }
  return g;
}

const G = graph();

/** the top folder of a file, or the engine provider folder ("engines/llama") */
function layer(file: string): string {
  const parts = file.split('/');
  return parts.length > 1 ? parts[0]! : file.replace(/\.ts$/, '');
}

/** What each top folder may import besides itself. */
const ALLOWED: Record<string, string[]> = {
  platform: [],
  codec: ['platform'],
  engines: ['platform', 'codec'],
  models: ['platform', 'engines'],
  portal: ['platform', 'models'],
  api: ['platform', 'engines', 'models', 'portal'],
  responses: ['platform', 'engines', 'models', 'portal', 'api', 'codec'],
  audio: ['platform', 'engines', 'models', 'portal', 'api', 'codec'],
  chat: ['platform', 'engines', 'models', 'portal', 'api'],
  embeddings: ['platform', 'engines', 'models', 'portal', 'api'],
  web: ['platform', 'models', 'portal'],
  compose: ['platform', 'codec', 'engines', 'models', 'portal', 'api', 'responses', 'audio', 'chat', 'embeddings', 'web'],
  cli: ['platform', 'models', 'portal', 'compose', 'web'],
};

test('every folder imports only the floors below it (data flows one way)', () => {
  const wrong: string[] = [];
  for (const [file, deps] of G) {
    const from = layer(file);
    const allowed = ALLOWED[from];
    assert.ok(allowed, `${file}: the folder ${from} has no place in the layers (add it to docs/architecture.md and this test)`);
    for (const d of deps) {
      const to = layer(d);
      if (to !== from && !allowed.includes(to)) wrong.push(`${file} -> ${d}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('a provider imports no other provider (what two share lives in engines/shared)', () => {
  const wrong: string[] = [];
  const provider = (f: string) => {
    const [top, sub] = f.split('/');
    return top === 'engines' && sub && !sub.endsWith('.ts') && sub !== 'shared' ? sub : undefined;
  };
  for (const [file, deps] of G) {
    const p = provider(file);
    if (!p) continue;
    for (const d of deps) {
      const q = provider(d);
      if (q && q !== p) wrong.push(`${file} -> ${d}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('no import cycle anywhere in src', () => {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const cycles: string[][] = [];
  const strong = (v: string) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    on.add(v);
    for (const w of G.get(v) ?? []) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1) cycles.push(comp);
    }
  };
  for (const f of G.keys()) if (!idx.has(f)) strong(f);
  assert.deepEqual(cycles, []);
});

test('the checks see the code (the graph is not empty and has the known edges)', () => {
  assert.ok(G.size > 50, `${G.size} files`);
  assert.ok(G.get('compose/runtime.ts')?.includes('compose/http.ts'));
  assert.ok(G.get('engines/providers.ts')?.includes('engines/llama/provider.ts'));
});
