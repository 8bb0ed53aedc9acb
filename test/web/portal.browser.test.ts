/**
 * The page in a real Chromium: sign in by link, keys (create, see once, copy, revoke, restore, delete, the limit),
 * the playground calling the public API with the created key, usage, Chinese, a non-admin's org key, sign out and
 * an expired session. One browser for the file; one page per person, reused across the steps.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { sql } from '../../src/platform/db/index.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';

describe('the portal page in Chromium', () => {
  let t: TestApp & { url?: string };
  let up: ScriptedUpstream;
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  let fullKey = '';

  before(async () => {
    up = await startScriptedUpstream();
    const models = [{ name: 'chat-small', provider: 'openai-compatible', type: 'text', base_url: up.url, upstream_model: 'tiny' } as ModelSpec];
    t = await buildTestApp({ listen: true, models, builtins: true });
    browser = await launchChromium();
    ({ ctx, page, problems } = await openPage(browser, { width: 1280, height: 860 }));
    await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: t.url });
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    await up?.close();
  });

  const row = (name: string) => page.locator('tr', { has: page.locator('.key-name', { hasText: new RegExp(`^${name}$`) }) });
  const confirm = async (name: string, action: 'Revoke' | 'Restore' | 'Delete') => {
    await row(name)
      .getByRole('button', { name: `${action} ${name}` })
      .click();
    const dialog = page.locator('#confirm-dialog');
    await dialog.getByText(new RegExp(`${action} “${name}”\\?`)).waitFor();
    await dialog.locator('#confirm-yes').click();
    await page
      .getByRole('status')
      .filter({ hasText: `Key “${name}” ${action.toLowerCase()}d.` })
      .waitFor();
  };
  test('the sign-in page says how to get in; a sign-in link signs in and leaves no token behind', async () => {
    await page.goto(`${t.url}/`);
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    assert.match(await page.locator('.command').innerText(), /portico login --user/);
    assert.equal(await page.locator('#oidc-sign-in').count(), 0, 'no identity provider configured');
    await screenshot(page, 'signin');

    const link = await signInLink(t, 'alice', { acme: 'admin' });
    const started = Date.now();
    await page.goto(link);
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    assert.ok(Date.now() - started < 5000);
    assert.equal(new URL(page.url()).pathname, '/keys');
    assert.equal(new URL(page.url()).hash, '', 'the token left the address bar');
    const cookies = await ctx.cookies();
    const session = cookies.find((c) => c.name === 'portico_session')!;
    assert.ok(session, 'a session cookie');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(await page.evaluate(() => document.cookie), '', 'scripts cannot read it');
    const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
    assert.ok(!stored.includes(session.value) && !stored.includes(link.split('#token=')[1]), 'nothing secret in web storage');
    assert.match(await page.locator('#key-limits').innerText(), /Personal: 0 of 10 active keys/);

    // the same link a second time (another tab): refused with the reason
    const other = await ctx.newPage();
    await other.goto(link);
    await other.getByRole('alert').filter({ hasText: 'already been used' }).waitFor();
    await other.close();
  });

  test('create a key: the full key is shown once with a copy button, then only its display form', async () => {
    await page.locator('#create-key').click();
    const dialog = page.locator('#create-dialog');
    await dialog.getByLabel('Name').fill('laptop');
    await dialog.getByLabel('Description').fill('my laptop');
    await dialog.getByRole('checkbox', { name: 'responses' }).check();
    await dialog.getByRole('checkbox', { name: 'model:chat-small' }).check();
    const expiry = new Date(Date.now() + 30 * 86_400_000).toISOString().slice(0, 10);
    await dialog.getByLabel('Expires after').fill(expiry);
    await screenshot(page, 'create');
    await dialog.getByRole('button', { name: 'Create key' }).click();
    const created = page.locator('#created-dialog');
    await created.getByText('It will not be shown again').waitFor();
    fullKey = await created.locator('#created-key').inputValue();
    assert.match(fullKey, /^sk-[A-Za-z0-9]{38}$/);
    await created.getByRole('button', { name: 'Copy' }).click();
    await created.getByText('Copied to the clipboard.').waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), fullKey);
    await screenshot(page, 'created');
    // the key works against the API as it is (what the person pastes into their code)
    const models = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${fullKey}` } });
    assert.deepEqual(
      (await models.json()).data.map((m: any) => m.id),
      ['chat-small'],
    );
    await created.getByRole('button', { name: 'Try it in the playground' }).click();
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
    assert.ok(!(await page.content()).includes(fullKey), 'the full key is not in the page');
  });

  test('the playground calls the Responses API with that key and streams the answer, raw events viewable', async () => {
    up.script({ text: ['Hello', ' from', ' the', ' playground.'] });
    assert.match(await page.locator('#play-key option:checked').innerText(), /^laptop \(sk-/);
    await page.getByLabel('Instructions').fill('Be brief.');
    await page.getByLabel('Message').fill('Say hello');
    await page.locator('#text-send').click();
    await page.locator('#text-answer').getByText('Hello from the playground.').waitFor();
    await page
      .getByRole('status')
      .filter({ hasText: /Done \(\d+ output tokens\)/ })
      .waitFor();
    const req = up.requests.at(-1)!;
    assert.equal(req.body.model, 'tiny');
    assert.equal(JSON.stringify(req.body.messages).includes('Be brief.'), true, 'the instructions reached the model');
    await page.getByText(/Raw events \(\d+\)/).click();
    // the box is filled when it opens (its toggle event)
    await page.waitForFunction(() => document.querySelector('#text-events')?.textContent?.includes('[DONE]'));
    const events = await page.locator('#text-events').innerText();
    assert.match(events, /"type":"response.created"/);
    assert.match(events, /"type":"response.output_text.delta"/);
    assert.match(events, /"type":"response.completed"/);
    assert.match(events, /\[DONE\]/);
    await screenshot(page, 'playground', true);
    // the key is in the tab's memory, never in storage
    const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
    assert.ok(!stored.includes(fullKey));
  });

  test('revoke it and the playground is refused; restore it and it works; delete it and it is gone', async () => {
    await page.getByRole('link', { name: 'API keys' }).click();
    await confirm('laptop', 'Revoke');
    assert.equal(await row('laptop').locator('.badge').innerText(), 'revoked');
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Message').fill('Again');
    await page.locator('#text-send').click();
    await page
      .getByRole('alert')
      .filter({ hasText: /^API key has been revoked\./ })
      .waitFor();

    await page.getByRole('link', { name: 'API keys' }).click();
    await confirm('laptop', 'Restore');
    assert.equal(await row('laptop').locator('.badge').innerText(), 'active');
    up.script({ text: 'Back again.' });
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Message').fill('Again');
    await page.locator('#text-send').click();
    await page.locator('#text-answer').getByText('Back again.').waitFor();

    // rename and re-describe
    await page.getByRole('link', { name: 'API keys' }).click();
    await row('laptop').getByRole('button', { name: 'Edit laptop' }).click();
    await page.locator('#edit-dialog').getByLabel('Name').fill('work laptop');
    await page.locator('#edit-dialog').getByLabel('Description').fill('the one at work');
    await page.locator('#edit-dialog').getByRole('button', { name: 'Save' }).click();
    await row('work laptop').getByText('the one at work').waitFor();

    await confirm('work laptop', 'Delete');
    assert.equal(await row('work laptop').count(), 0);
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Message').fill('Once more');
    await page.locator('#text-send').click();
    await page
      .getByRole('alert')
      .filter({ hasText: /^Invalid API key\./ })
      .waitFor();
  });

  test('search, status filter and pages use the API’s own parameters', async () => {
    const user = { userId: 'alice', orgRoles: { acme: 'admin' } };
    for (const name of ['alpha one', 'alpha two', 'beta']) await t.services.inferenceKeys.create(user, { name });
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByLabel('Search').fill('alpha');
    await page.getByText('Page 1 of 1 (2 keys)').waitFor();
    assert.deepEqual((await page.locator('.key-name').allInnerTexts()).sort(), ['alpha one', 'alpha two']);
    await page.getByLabel('Search').fill('');
    await page.getByText('Page 1 of 1 (3 keys)').waitFor();
    await page.getByLabel('Per page').selectOption('10');
    await page.getByLabel('Status').selectOption('revoked');
    await page.getByText('No key matches.').waitFor();
    await page.getByLabel('Status').selectOption('');
    await page.getByText('(3 keys)').waitFor();
  });

  test('the 11th active key is refused with the message shown; the limit is shown before it is hit', async () => {
    const user = { userId: 'alice', orgRoles: { acme: 'admin' } };
    for (let i = 0; i < 6; i++) await t.services.inferenceKeys.create(user, { name: `bulk ${i}` });
    await page.reload();
    await page.getByText('Personal: 9 of 10 active keys').waitFor();
    assert.equal(await page.getByText('The limit of 10 active keys is reached').count(), 0);
    await page.locator('#create-key').click();
    await page.locator('#create-dialog').getByLabel('Name').fill('tenth');
    await page.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
    await page.locator('#created-dialog').getByRole('button', { name: 'I have saved it' }).click();
    await page.getByText('Personal: 10 of 10 active keys').waitFor();
    await page.getByRole('alert').filter({ hasText: 'The limit of 10 active keys is reached in: Personal' }).waitFor();
    await page.locator('#create-key').click();
    await page.locator('#create-dialog').getByLabel('Name').fill('eleventh');
    await page.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
    await page.locator('#create-dialog').getByRole('alert').filter({ hasText: 'active API key limit reached: at most 10 active keys' }).waitFor();
    await screenshot(page, 'limit');
    await page.keyboard.press('Escape');
    assert.equal(await page.locator('#create-dialog[open]').count(), 0, 'Escape closes the dialog');
    // an organisation key is still possible for its administrator
    await page.locator('#create-key').click();
    await page.locator('#create-dialog').getByLabel('Name').fill('team key');
    await page.locator('#create-dialog').getByLabel('Organisation').selectOption('acme');
    await page.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
    await page.locator('#created-dialog').getByRole('button', { name: 'I have saved it' }).click();
    await row('team key').locator('.tag', { hasText: 'acme' }).waitFor();
    await screenshot(page, 'keys');
  });

  test('usage and balance: totals, charts by model, a date range', async () => {
    await t.services.usage.grant('alice', 'default', 25);
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage and balance' }).waitFor();
    await page.locator('#chart-requests .plot svg').waitFor();
    // charts of what has data only: no speech or transcription here
    assert.deepEqual(await page.locator('.chart figcaption').allInnerTexts(), ['Requests', 'Tokens']);
    // billing is off here (BILLING_ENABLED unset): the card shows the credits used and says billing is off, not a
    // balance (which would go below zero without anything being refused)
    const card = page.locator('.stat').filter({ has: page.locator('#balance-value') });
    assert.equal(await card.locator('.label').innerText(), 'Credits used');
    assert.equal(await page.locator('#balance-value').innerText(), '0');
    assert.match(await card.innerText(), /billing is off: usage is priced, not charged/);
    const table = await page.getByRole('table', { name: 'By model' }).innerText();
    assert.match(table, /chat-small\s+2\b/, 'two answered requests recorded for the model');
    assert.match(String(await page.locator('#chart-requests .plot svg').getAttribute('aria-label')), /Requests: chat-small 2/);
    await screenshot(page, 'usage', true);
    // a range without usage
    await page.getByLabel('From', { exact: true }).fill('2020-01-01');
    await page.getByLabel('To', { exact: true }).fill('2020-01-31');
    await page.getByRole('button', { name: 'Show' }).click();
    await page.getByText('No usage in this period.').waitFor();
    await page.getByRole('button', { name: 'Last 30 days' }).click();
    await page.locator('.chart .plot svg').first().waitFor();
  });

  test('a Management API Key: made on its own tab with the query scopes, shown once, and it reads the balance the page shows', async () => {
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByRole('tab', { name: 'Management API Keys' }).click();
    await page.locator('#create-key').click();
    const dialog = page.locator('#create-dialog');
    await dialog.getByLabel('Name').fill('billing dashboard');
    await dialog.getByRole('checkbox', { name: 'balance:read' }).check();
    await dialog.getByRole('button', { name: 'Create key' }).click();
    const created = page.locator('#created-dialog');
    await created.getByText('It will not be shown again').waitFor();
    const mk = await created.locator('#created-key').inputValue();
    assert.match(mk, /^mk-[A-Za-z0-9]{38}$/);
    assert.equal(await created.locator('#use-in-playground').count(), 0, 'a Management API Key has no playground');
    await created.locator('.buttons button').last().click();
    await row('billing dashboard').getByText('balance:read').waitFor();
    assert.ok(!(await page.content()).includes(mk), 'the full key is gone from the page');
    // the key reads the balance query API (25, granted above) and nothing it was not scoped for
    const balance = await fetch(`${t.url}/v1/portal/query/balance`, { headers: { authorization: `Bearer ${mk}` } });
    assert.equal(balance.status, 200);
    const read = (await balance.json()).data;
    assert.equal(read.balance, 25);
    assert.equal(read.billing_enabled, false);
    const usage = await fetch(`${t.url}/v1/portal/query/usage`, { headers: { authorization: `Bearer ${mk}` } });
    assert.equal(usage.status, 403);
    await page.getByRole('tab', { name: 'Inference keys' }).click();
  });

  test('switch to Chinese: the page and the API errors in Chinese, kept on reload', async () => {
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByLabel('Language').selectOption('zh');
    await page.getByRole('heading', { name: 'API 密钥' }).waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh-CN');
    await page.getByText('个人：10 / 10 个有效密钥').waitFor();
    await page.locator('#create-key').click();
    await page.locator('#create-dialog').getByLabel('名称').fill('第十一个');
    await page.locator('#create-dialog').getByRole('button', { name: '创建密钥' }).click();
    await page.locator('#create-dialog').getByRole('alert').filter({ hasText: '有效密钥数量已达上限' }).waitFor();
    await page.keyboard.press('Escape');
    await screenshot(page, 'zh');
    // an error the server localizes itself comes as it is
    await page.getByRole('link', { name: '试用' }).click();
    await page.getByLabel('推理密钥').selectOption('__paste');
    await page.getByLabel('密钥（sk-…）').fill('sk-not-a-real-key');
    await page.getByLabel('消息').fill('你好');
    await page.locator('#text-send').click();
    await page.getByRole('alert').filter({ hasText: 'API 密钥格式无效' }).waitFor();
    await page.reload();
    await page.getByRole('heading', { name: '试用' }).waitFor();
    await page.getByLabel('语言').selectOption('en');
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
  });

  test('a non-admin cannot make an organisation key: the choice is closed and the server refuses it', async () => {
    const bobCtx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    try {
      const bob = await bobCtx.newPage();
      await bob.goto(await signInLink(t, 'bob', { acme: 'member' }));
      await bob.getByRole('heading', { name: 'API keys' }).waitFor();
      await bob.locator('#create-key').click();
      const option = bob.locator('#new-org option[value="acme"]');
      assert.equal(await option.innerText(), 'acme (administrators only)');
      assert.equal(await option.isDisabled(), true);
      // forcing the choice in the page does not help: the API refuses, and the page says why
      await bob.locator('#new-org').evaluate((s: HTMLSelectElement) => {
        s.options[1].disabled = false;
      });
      await bob.locator('#create-dialog').getByLabel('Name').fill('sneaky');
      await bob.locator('#new-org').selectOption('acme');
      await bob.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
      await bob
        .locator('#create-dialog')
        .getByRole('alert')
        .filter({ hasText: /^Creating an organization-level key requires an administrator/ })
        .waitFor();
      assert.equal((await t.services.inferenceKeys.list({ userId: 'bob', orgRoles: {} }, { page: 1, per_page: 10 })).total, 0);
    } finally {
      await bobCtx.close();
    }
  });

  test('what is typed or chosen at once counts, even when the next frame comes late; a late list answer never replaces a newer one', async () => {
    // Preact runs plain effects after the next frame, or 100 ms later without one. A dialog that emptied its fields
    // in such an effect wiped what a fast typist (or an autofill) had typed: the create dialog lost its name this way.
    // With frames held back such a reset comes 100 ms late: after the typing, or after the check that a dialog
    // opened again starts empty.
    const danCtx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    try {
      await danCtx.addInitScript(() => {
        window.requestAnimationFrame = () => 0;
      });
      const dan = await danCtx.newPage();
      await dan.goto(await signInLink(t, 'dan'));
      await dan.getByRole('heading', { name: 'API keys' }).waitFor();
      await dan.getByText('Personal: 0 of 10 active keys').waitFor();
      await dan.locator('#create-key').click();
      await dan.locator('#new-name').fill('typed at once');
      await dan.waitForTimeout(300);
      assert.equal(await dan.locator('#new-name').inputValue(), 'typed at once');
      await dan.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
      await dan.locator('#created-dialog').getByRole('button', { name: 'I have saved it' }).click();
      await dan.locator('.key-name', { hasText: /^typed at once$/ }).waitFor();
      // the edit dialog: its fields hold the key's values, and what is typed at once replaces them for good
      await dan.getByRole('button', { name: 'Edit typed at once' }).click();
      await dan.locator('#edit-name').fill('renamed at once');
      await dan.waitForTimeout(300);
      assert.equal(await dan.locator('#edit-name').inputValue(), 'renamed at once');
      // opening the create dialog again starts empty
      await dan.keyboard.press('Escape');
      await dan.locator('#create-key').click();
      assert.equal(await dan.locator('#new-name').inputValue(), '');
      await dan.keyboard.press('Escape');
      // a language switch reaches the page's language and the API at once: the request right after it asks in Chinese
      await dan.getByLabel('Language').selectOption('zh');
      assert.equal(await dan.evaluate(() => document.documentElement.lang), 'zh-CN');
      const asked = dan.waitForRequest((r) => r.url().includes('/v1/portal/api-keys?') && r.url().includes('status=revoked'));
      await dan.getByLabel('状态').selectOption('revoked');
      assert.match((await asked).headers()['accept-language'], /^zh/);
      await dan.getByLabel('状态').selectOption('');
      await dan.getByLabel('语言').selectOption('en');
      await dan.locator('.key-name', { hasText: /^typed at once$/ }).waitFor();
      // a list answer that comes back late does not replace the answer to a newer request
      await dan.route(/\/v1\/portal\/api-keys\?.*per_page=10/, async (route) => {
        if (route.request().url().includes('status=')) return route.continue();
        await new Promise((r) => setTimeout(r, 600));
        await route.continue();
      });
      await dan.getByLabel('Per page').selectOption('10');
      await dan.getByLabel('Status').selectOption('revoked');
      await dan.getByText('No key matches.').waitFor();
      await dan.waitForTimeout(900);
      assert.equal(await dan.getByText('No key matches.').count(), 1, 'the late answer (the unfiltered list) was dropped');
      assert.equal(await dan.locator('.key-name').count(), 0);
    } finally {
      await danCtx.close();
    }
  });

  test('sign out leads back to the sign-in page; the session is over', async () => {
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    await page.getByText('You are signed out.').waitFor();
    assert.equal(new URL(page.url()).pathname, '/signin');
    assert.equal((await ctx.cookies()).filter((c) => c.name === 'portico_session').length, 0);
    await page.goBack();
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    await page.goto(`${t.url}/keys`);
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
  });

  test('an expired session leads back to the sign-in page with a clear message', async () => {
    await page.goto(await signInLink(t, 'carol'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByText('No keys yet.').waitFor();
    await page.getByText('Personal: 0 of 10 active keys').waitFor();
    await sql`update web_sessions set expires_at = 1 where user_id = 'carol'`.execute(t.services.db.db);
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    await page.getByText('Your session has ended (it expired or was signed out).').waitFor();
    assert.deepEqual(problems, [], 'no script errors and no CSP violations on any screen');
  });
});
