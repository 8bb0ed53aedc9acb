#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node's test runner.
// Usage: node scripts/run-tests.mjs [filter...]   (TEST_OUT_DIR picks another compiled tree)
//
// The multi-process cluster tests (test/cluster: several Portico processes, PostgreSQL and Redis cut under
// load, recovery measured against a clock) run in a second pass on their own, so the rest of the suite does
// not compete with them for the two cores. The browser tests (*.browser.test.js: Chromium driving the web page)
// run in a pass of their own too: Chromium's CPU use would otherwise upset the timing checks of the audio tests.
// That pass runs one file at a time for the same reason: test/realtime/talk.browser checks that the page opens its
// session within the 2 s of lead silence its fake microphone plays (1.3 s taken one file at a time, 4.3 s with two
// files at once on a busy 2-core machine, which did not make the pass much shorter: docs/performance.md, 2026-11-29).
// Within each pass the files start longest first (their times in the last run, kept in
// node_modules/.cache/portico/test-times.json), so that the passes' slots end together. The last line sums every pass.
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { spawn } from 'node:child_process';

const outDir = process.env.TEST_OUT_DIR || 'dist';
const keepTimes = process.argv.includes('--keep-times');
const filters = process.argv.slice(2).filter((a) => a !== '--keep-times');
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith('.test.js') && (filters.length === 0 || filters.some((f) => p.includes(f)))) files.push(p);
  }
})(join(outDir, 'test'));
files.sort();

// Longest first: each pass hands its files out in order to `concurrency` slots, so a long file started last keeps
// the pass going alone at its end. The order comes from the files' times in earlier runs (written below, in
// node_modules/.cache, or PORTICO_TEST_TIMES), over the times of a whole run kept in the repository
// (test/times.json: a fresh clone, as CI's, orders its files too; `node scripts/run-tests.mjs --keep-times` after a
// whole run writes it again); a file with no time yet goes first (it may be long); with no times at all, the larger
// compiled file first.
const timesPath = process.env.PORTICO_TEST_TIMES || join('node_modules', '.cache', 'portico', 'test-times.json');
/** a test file's name in the times: its path under test/ without the extension (the reporter names the .ts source) */
const timeKey = (f) => {
  const i = f.lastIndexOf(`test${sep}`);
  return (i < 0 ? f : f.slice(i))
    .split(sep)
    .join('/')
    .replace(/\.test\.[jt]s$/, '');
};
const seedPath = join('test', 'times.json');
let known = {};
for (const path of [seedPath, timesPath]) {
  try {
    Object.assign(known, JSON.parse(readFileSync(path, 'utf8')));
  } catch {
    // no earlier run
  }
}
const haveTimes = Object.keys(known).length > 0;
const expected = new Map(files.map((f) => [f, haveTimes ? (known[timeKey(f)] ?? Infinity) : statSync(f).size]));
files.sort((a, b) => expected.get(b) - expected.get(a) || a.localeCompare(b));

const isCluster = (f) => f.includes(`${sep}test${sep}cluster${sep}`);
const isBrowser = (f) => f.endsWith('.browser.test.js');
// the container test builds an image and runs several containers (CPU-heavy for minutes): with the cluster tests,
// one file at a time, not beside the timing checks of the main pass
const isContainer = (f) => f.includes(`${sep}test${sep}deploy${sep}container`);
// the cluster tests are several instances sharing PostgreSQL: without PostgreSQL there is nothing they can run on
const pgOff = process.env.PORTICO_TEST_PG === 'off';
const clusterFiles = files.filter(isCluster);
if (pgOff && clusterFiles.length) console.log(`# PORTICO_TEST_PG=off: the ${clusterFiles.length} cluster test files (several instances on PostgreSQL) are not run`);
const passes = [
  // three files at once on two cores: most files spend much of their time waiting (on upstreams, processes,
  // timers), and their bounds allow for a busy machine (docs/performance.md, "The test suite")
  { files: files.filter((f) => !isCluster(f) && !isBrowser(f) && !isContainer(f)), concurrency: process.env.TEST_CONCURRENCY || 3 },
  { files: files.filter(isBrowser), concurrency: 1 },
  { files: pgOff ? [] : clusterFiles, concurrency: 1 },
  // the container test builds the image from nothing (apt, npm ci twice, the build) before its first check: its
  // own steps have their own bounds (test/deploy/container.test.ts); the file's bound only catches a hang
  { files: files.filter(isContainer), concurrency: 1, timeoutMs: 900_000 },
].filter((p) => p.files.length > 0);

// the embedded database every test app starts from: created and migrated once for the run instead of once per app
// (test/helpers/db-template.ts); made here, before any test process starts, so that none waits for another to make it
const runDir = mkdtempSync(join(tmpdir(), 'portico-test-run-'));
const templates = await import(pathToFileURL(resolve(outDir, 'test/helpers/db-template.js')).href);
const madeAt = performance.now();
// on PostgreSQL a template database of this run's own (CREATE DATABASE ... TEMPLATE), dropped at the end; made while
// PGlite makes its own (the server does that work, not this process)
const pgTemplate = pgOff ? undefined : `portico_test_tpl_${templates.templateKey()}_${process.pid}`;
const pgMade = pgTemplate
  ? templates.makePgTemplate(pgTemplate).then(
      (name) => name,
      (e) => {
        // a user without CREATEDB (or no server yet): every app makes a schema of its own, as before
        console.log(`# no template database on PostgreSQL (${e.message}): each test migrates a schema of its own`);
        return 'off';
      },
    )
  : undefined;
process.env.PORTICO_TEST_PGLITE_TEMPLATE = await templates.makeTemplate(join(runDir, 'pglite.tar'));
if (pgMade) process.env.PORTICO_TEST_PG_TEMPLATE = await pgMade;
console.log(`# the databases' templates made in ${Math.round(performance.now() - madeAt)} ms`);

// each pass writes the time of each file (scripts/test-times.mjs); the slowest are printed at the end.
// A file's bound only catches a hang: test/cli/backup (real processes: serve, backup, restore) takes ~60 s on a quiet
// machine and was seen at 161 s with the load average at 13-19, so the bound is 300 s, not 180 s.
let passNo = 0;
function run({ files, concurrency, timeoutMs = 300_000 }) {
  return new Promise((resolve) => {
    const times = join(runDir, `times-${passNo++}.txt`);
    // scripts/test-pass.mjs, not `node --test`: the CLI sorts the files by name, the pass must keep the order above
    const args = ['--enable-source-maps', fileURLToPath(new URL('./test-pass.mjs', import.meta.url)), String(concurrency), String(timeoutMs), times, ...files];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    const counts = { pass: 0, fail: 0, cancelled: 0, skipped: 0 };
    let tail = '';
    child.stdout.on('data', (d) => {
      process.stdout.write(d);
      tail = (tail + d.toString()).slice(-4000);
    });
    child.on('close', (code) => {
      for (const k of Object.keys(counts)) {
        const m = new RegExp(`^# ${k} (\\d+)$`, 'm').exec(tail);
        if (m) counts[k] = Number(m[1]);
      }
      resolve({ code: code ?? 1, counts });
    });
  });
}

let failed = false;
const total = { pass: 0, fail: 0, cancelled: 0, skipped: 0 };
for (const p of passes) {
  const { code, counts } = await run(p);
  if (code !== 0) failed = true;
  for (const k of Object.keys(total)) total[k] += counts[k];
}
const measured = readdirSync(runDir)
  .filter((n) => n.startsWith('times-') && n.endsWith('.txt'))
  .flatMap((n) => readFileSync(join(runDir, n), 'utf8').split('\n').filter(Boolean))
  .map((l) => [Number(l.slice(0, l.indexOf(' '))), l.slice(l.indexOf(' ') + 1)])
  .sort((a, b) => b[0] - a[0]);
const slowest = measured;
// the times of this run's files replace their earlier ones (the others are kept): the next run's order
try {
  for (const [ms, f] of measured) known[timeKey(f)] = ms;
  mkdirSync(dirname(timesPath), { recursive: true });
  // written whole and then renamed: two runs ending together (worktrees share node_modules) never leave half a file
  writeFileSync(`${timesPath}.${process.pid}`, JSON.stringify(known, Object.keys(known).sort(), 1) + '\n');
  renameSync(`${timesPath}.${process.pid}`, timesPath);
} catch (e) {
  console.log(`# the files' times not kept for the next run's order (${e.message})`);
}
// --keep-times: this run's times become the repository's (a whole run only: a filtered one would drop the others)
if (keepTimes && filters.length === 0) {
  const seed = Object.fromEntries(measured.map(([ms, f]) => [timeKey(f), Math.round(ms / 100) * 100]).sort((a, b) => a[0].localeCompare(b[0])));
  writeFileSync(seedPath, JSON.stringify(seed, null, 2) + '\n');
  console.log(`# the files' times written to ${seedPath}`);
}
console.log(
  `# the slowest test files (the sum of their top-level tests' times):\n${slowest
    .slice(0, 15)
    .map(([ms, f]) => `#   ${(ms / 1000).toFixed(1)} s ${relative(process.cwd(), f)}`)
    .join('\n')}`,
);
const failures = readdirSync(runDir)
  .filter((n) => n.endsWith('.failed'))
  .flatMap((n) => readFileSync(join(runDir, n), 'utf8').split('\n').filter(Boolean))
  .map((l) => JSON.parse(l));
if (failures.length > 0) {
  console.log(`# the tests that failed (${failures.length}):`);
  for (const f of failures) {
    const where = f.file ? relative(process.cwd(), f.file) : '?';
    console.log(`# ✖ ${where}: ${f.name}\n${f.why.replace(/^/gm, '#     ')}`);
  }
}
rmSync(runDir, { recursive: true, force: true });
if (pgTemplate && process.env.PORTICO_TEST_PG_TEMPLATE !== 'off') await templates.dropPgTemplate(pgTemplate);
const notPassed = total.fail + total.cancelled;
console.log(`tests: ${total.pass} passed, ${notPassed} failed, ${total.skipped} skipped`);
process.exit(failed || notPassed > 0 || total.pass === 0 ? 1 : 0);
