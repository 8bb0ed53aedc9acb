import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { mintSignInLink } from '../../src/web/link.js';
import type { TestApp } from './app.js';

export const CHROMIUM = process.env.PORTICO_CHROMIUM || '/usr/bin/chromium';

/**
 * Debian's Chromium, headless, driven by playwright-core. Missing Chromium is a failure, not a skip: the page is
 * only proven when a real browser ran it (.ci/run installs it). Each launch gets a fresh profile (Playwright makes
 * a new temporary user-data-dir for every launch and removes it on close).
 */
export async function launchChromium(extraArgs: string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`Chromium is missing at ${CHROMIUM}: install Debian's chromium (apt-get install -y chromium; .ci/run does)`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...extraArgs,
    ],
  });
}

/**
 * A page of its own (a new context: no cookie shared with another page) in English, a desktop's size by default,
 * with its errors and failed CSP checks collected (watchConsole).
 */
export async function openPage(browser: Browser, viewport = { width: 1280, height: 900 }): Promise<{ ctx: BrowserContext; page: Page; problems: string[] }> {
  const ctx = await browser.newContext({ viewport, locale: 'en-US' });
  const page = await ctx.newPage();
  return { ctx, page, problems: watchConsole(page) };
}

/** A sign-in link for the app under test (what `portico login` prints). */
export async function signInLink(t: TestApp & { url?: string }, userId: string, orgRoles: Record<string, string> = {}, ttlSeconds?: number): Promise<string> {
  const { url } = await mintSignInLink({ pepper: t.config.keyPepper, publicUrl: t.url!, userId, orgRoles, ttlSeconds });
  return url;
}

/**
 * Screenshots go to dist/screenshots (built output, not in git), or into docs/img, where docs/portal.md shows
 * them, with PORTICO_DOC_SCREENSHOTS=1: a test run does not rewrite the committed pictures unless asked to.
 */
const IMG_DIR = process.env.PORTICO_DOC_SCREENSHOTS === '1' ? 'docs/img' : 'dist/screenshots';

/** Saves a screenshot of the page (portal-NAME.png; the operator's console's: console-NAME.png). */
export async function screenshot(page: Page, name: string, fullPage = false, prefix: 'portal' | 'console' = 'portal') {
  mkdirSync(IMG_DIR, { recursive: true });
  await page.screenshot({ path: join(IMG_DIR, `${prefix}-${name}.png`), fullPage });
}

/** Collects page errors and failed CSP checks, so a test can assert the page ran cleanly. */
export function watchConsole(page: Page): string[] {
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/.test(m.text())) problems.push(`csp: ${m.text()}`);
  });
  return problems;
}
