/**
 * The layers of docs/architecture.md, checked on the source: which folder may import which, no provider
 * importing another, no feature importing or naming a provider, nothing importing the composition root but the
 * CLI, and no import cycle at all; the layers below the features name no feature (what the feature modules declare
 * never appears there as a string), and a feature of a test fixture imports only what a feature may.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROVIDERS } from '../src/engines/providers.js';
import ts from 'typescript';
import { buildTestApp } from './helpers/app.js';
import { createImagesModule } from './fixtures/images/module.js';

// compiled to dist/test: the sources are two levels up
const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');
const FIXTURES = resolve(dirname(fileURLToPath(import.meta.url)), '../../test/fixtures');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : /\.ts$/.test(f) && !f.endsWith('.d.ts') ? [p] : [];
  });
}

/** file (relative to src) -> files it imports (relative to src), type-only imports included */
function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const f of sources(SRC))
    g.set(
      relative(SRC, f),
      importsOf(f).map((d) => relative(SRC, d)),
    );
  return g;
}

/** the files (absolute paths) a source file imports by a relative path, type-only imports included */
function importsOf(f: string): string[] {
  const deps: string[] = [];
  for (const m of readFileSync(f, 'utf8').matchAll(/(?:import|export)\s[^'"]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g)) {
    const spec = m[1] ?? m[2]!;
    const base = resolve(dirname(f), spec).replace(/\.(js|ts)$/, '');
    const hit = [`${base}.ts`, join(base, 'index.ts')].find((c) => existsSync(c));
    if (hit) deps.push(hit);
  }
  return deps;
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

/** The floors below the features: none of them may name one. */
const LOWER = ['platform', 'codec', 'engines', 'models', 'portal', 'api'];

/**
 * A top folder the table does not list but that holds a module.ts is a new feature: it may import the floors below
 * the features, and the composition root (and nothing else) may import it. Adding one is one folder and the line
 * in compose/runtime.ts that builds it.
 */
const isNewFeature = (top: string) => !(top in ALLOWED) && existsSync(join(SRC, top, 'module.ts'));

test('every folder imports only the floors below it (data flows one way)', () => {
  const wrong: string[] = [];
  for (const [file, deps] of G) {
    const from = layer(file);
    const allowed = isNewFeature(from) ? LOWER : ALLOWED[from];
    assert.ok(allowed, `${file}: the folder ${from} has no place in the layers (add it to docs/architecture.md and this test)`);
    for (const d of deps) {
      const to = layer(d);
      if (to !== from && !allowed.includes(to) && !(from === 'compose' && isNewFeature(to))) wrong.push(`${file} -> ${d}`);
    }
  }
  assert.deepEqual(wrong, []);
});

/**
 * Words a feature declares that are also a lower layer's own vocabulary, where that layer may use them: the model
 * types (engine capabilities) share names with the embeddings and audio features' operations, the openai-compatible
 * provider names the upstream APIs it speaks, and the database has a table of stored responses.
 */
const SHARED: Array<{ value: string; under: string[]; why: string }> = [
  { value: 'embeddings', under: ['engines/', 'models/'], why: 'a model type (engines/provider.ts CAPABILITIES)' },
  { value: 'speech', under: ['engines/', 'models/'], why: 'a model type (engines/provider.ts CAPABILITIES)' },
  { value: 'transcription', under: ['engines/', 'models/'], why: 'a model type (engines/provider.ts CAPABILITIES)' },
  { value: 'realtime', under: ['engines/', 'models/'], why: 'a model type (engines/provider.ts CAPABILITIES)' },
  { value: 'responses', under: ['engines/openai-compatible/'], why: 'the upstream API the provider speaks (`api: responses`)' },
  { value: 'chat.completions', under: ['engines/openai-compatible/'], why: 'the upstream API the provider speaks (`api: chat.completions`)' },
  { value: 'responses', under: ['platform/db/'], why: 'the table of stored responses' },
  { value: 'audio', under: ['engines/openai-compatible/audio.ts'], why: 'the file name of an upload that has none' },
];

/**
 * every string a file's code holds (literals and the fixed parts of templates; comments are not code), and the
 * names of the form `per_...` (a pricing key written as a property: `pricing.per_character`, `{ per_character: 1 }`)
 */
function stringsOf(file: string): Array<{ text: string; line: number }> {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const out: Array<{ text: string; line: number }> = [];
  const visit = (n: ts.Node) => {
    const literal = ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n) || ts.isTemplateHead(n) || ts.isTemplateMiddle(n) || ts.isTemplateTail(n);
    if (literal || (ts.isIdentifier(n) && n.text.startsWith('per_'))) {
      out.push({ text: n.text, line: sf.getLineAndCharacterOfPosition(n.getStart()).line + 1 });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

test('no lower layer names a feature: what the modules declare is never a string (or a pricing key) of their code', async () => {
  // what the runtime collects, with the images fixture added as a newcomer would add a feature
  const t = await buildTestApp({ models: [], runtime: { extraModules: [(d) => createImagesModule(d)] } });
  const d = t.runtime.declared;
  await t.close();
  const names = new Set([...d.features, ...d.scopes, ...d.operations, ...d.units.map((u) => u.price)]);
  for (const n of ['responses', 'chat', 'embeddings', 'audio', 'chat.completions', 'speech', 'transcription', 'translation', 'images', 'per_character', 'per_image']) {
    assert.ok(names.has(n), `the declarations hold '${n}': ${[...names].join(', ')}`);
  }
  const wrong: string[] = [];
  let seen = 0;
  for (const [file] of G) {
    if (!LOWER.includes(layer(file))) continue;
    for (const s of stringsOf(join(SRC, file))) {
      seen++;
      if (!names.has(s.text)) continue;
      if (SHARED.some((x) => x.value === s.text && x.under.some((u) => file.startsWith(u)))) continue;
      wrong.push(`${file}:${s.line} '${s.text}'`);
    }
  }
  assert.ok(seen > 1000, `${seen} strings read`);
  assert.deepEqual(wrong, [], 'a lower layer names a feature: take the list from what the modules declare (src/compose/declarations.ts)');
});

test('a feature of a test fixture imports only what a feature may (one folder, nothing else to change)', () => {
  const wrong: string[] = [];
  const fixtures = readdirSync(FIXTURES).filter((f) => statSync(join(FIXTURES, f)).isDirectory());
  assert.ok(fixtures.includes('images'));
  for (const folder of fixtures) {
    const root = join(FIXTURES, folder);
    for (const f of sources(root)) {
      for (const dep of importsOf(f)) {
        if (dep.startsWith(root + '/')) continue;
        const inSrc = relative(SRC, dep);
        if (inSrc.startsWith('..') || !LOWER.includes(layer(inSrc))) wrong.push(`${relative(FIXTURES, f)} -> ${dep}`);
      }
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

/** The features: what they need of a provider they ask the provider contract (engines/provider.ts), naming none. */
const FEATURES = ['responses', 'chat', 'embeddings', 'audio', 'messages', 'realtime', 'web'];
const PROVIDER_IDS = [...PROVIDERS.keys()];
/** the provider folders under engines/ (everything but shared/) */
const PROVIDER_FOLDERS = readdirSync(join(SRC, 'engines')).filter((f) => f !== 'shared' && statSync(join(SRC, 'engines', f)).isDirectory());

/** The source without its comments (a comment may mention a provider; code may not). */
function code(file: string): string {
  return readFileSync(join(SRC, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/(^|\s)\/\/.*$/gm, '$1');
}

/** The provider ids written as a whole string literal ('whisper', "flite", `llama`) in this text. */
function namedProviders(text: string): string[] {
  return [...text.matchAll(/(['"`])([A-Za-z0-9._-]+)\1/g)].map((m) => m[2]!).filter((s) => PROVIDER_IDS.includes(s));
}

test('no feature imports a provider or names one (providers declare what features ask of them)', () => {
  const wrong: string[] = [];
  for (const [file, deps] of G) {
    if (!FEATURES.includes(layer(file))) continue;
    for (const d of deps) {
      const [top, sub] = d.split('/');
      if (top === 'engines' && sub && PROVIDER_FOLDERS.includes(sub)) wrong.push(`${file} imports ${d}`);
    }
    for (const id of namedProviders(code(file))) wrong.push(`${file} names the provider '${id}'`);
  }
  assert.deepEqual(wrong, []);
});

test('the provider check sees providers (their ids, their folders, a literal naming one)', () => {
  assert.ok(PROVIDER_IDS.length >= 6 && PROVIDER_IDS.includes('whisper'), PROVIDER_IDS.join(', '));
  assert.deepEqual([...PROVIDER_FOLDERS].sort(), [...PROVIDER_IDS].sort());
  assert.deepEqual(namedProviders(`if (spec.provider === 'whisper' || p === "openai-compatible") run(\`llama\`, 'whisper-1', 'a whisper model')`), [
    'whisper',
    'openai-compatible',
    'llama',
  ]);
  assert.equal(code('audio/engines.ts').includes('/**'), false);
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
