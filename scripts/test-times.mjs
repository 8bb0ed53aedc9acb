// A node:test reporter (scripts/run-tests.mjs adds it beside the TAP output): the time each test file took, as the sum
// of its top-level tests' and suites' durations (a suite's includes its before/after hooks), written as `<ms> <file>`
// lines, slowest first, so a run says where its time went.
export default async function* testTimes(source) {
  const spent = new Map();
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { file, nesting, details } = event.data ?? {};
    // with source maps on, a file's tests are named by their TypeScript source (test/...ts), else by the compiled file
    if (nesting !== 0 || !/\.test\.[jt]s$/.test(file ?? '') || typeof details?.duration_ms !== 'number') continue;
    spent.set(file, (spent.get(file) ?? 0) + details.duration_ms);
  }
  const rows = [...spent].map(([file, ms]) => [Math.round(ms), file]).sort((a, b) => b[0] - a[0]);
  for (const [ms, file] of rows) yield `${ms} ${file}\n`;
}
