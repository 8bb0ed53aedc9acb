import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';

/**
 * axe-core (Deque's accessibility engine), run inside the page. It is found as the `axe-core` package, or at
 * PORTICO_AXE_CORE (the path of its axe.min.js). Missing axe-core is a failure, not a skip, as missing Chromium is.
 */
function axeSource(): string {
  let path = process.env.PORTICO_AXE_CORE;
  if (!path) {
    try {
      path = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
    } catch {
      path = undefined;
    }
  }
  if (!path || !existsSync(path)) throw new Error('axe-core is missing: install the axe-core package (a dev dependency) or set PORTICO_AXE_CORE to its axe.min.js');
  return readFileSync(path, 'utf8');
}

let source: string | undefined;

/**
 * The WCAG 2.1 A/AA (and best-practice) violations axe-core finds in the page as it is now, one line each (rule,
 * then the offending elements). Evaluated through the DevTools protocol, so the page's Content-Security-Policy
 * (no inline script) stays as it is.
 */
export async function axeViolations(page: Page, state: string): Promise<string[]> {
  source ??= axeSource();
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(source);
  const found = await page.evaluate(async () => {
    const r = await (window as any).axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } });
    return r.violations.map((v: any) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n: any) => n.target.join(' ')).join(', ')}`);
  });
  return found.map((f: string) => `${state}: ${f}`);
}
