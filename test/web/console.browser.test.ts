/**
 * The operator's console in a real Chromium: who sees it (an operator; not a member nor an organization's
 * administrator), its own chunk, and each screen's operations (search users, disable and enable keys, grant credits
 * with a note, set and remove a budget, add an operator, read the audit log, usage grouped with a chart, an
 * organization's members), with what the page shows checked against the database and the admin API; axe-core on
 * each new state; every screen in English and in Chinese. One browser for the file; one page per person, reused.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { launchChromium, openPage, screenshot, signInLink, watchConsole } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { use } from '../admin/helpers.js';
import { waitFor } from '../helpers/wait.js';

describe("the operator's console in Chromium", () => {
  let t: TestApp & { url?: string };
  let browser: Browser;
  let page: Page;
  let problems: string[];
  const a11y: string[] = [];
  const check = async (p: Page, state: string) => a11y.push(...(await axeViolations(p, state)));
  const db = () => t.services.db.db;
  /** an admin API call from inside the page: its session cookie, as the console makes them */
  const api = (p: Page, path: string) =>
    p.evaluate(async (path) => {
      const res = await fetch(`/v1/admin${path}`, { credentials: 'same-origin' });
      return { status: res.status, body: await res.json() };
    }, path);
  const text = async (p: Page, sel: string) => (await p.locator(sel).innerText()).trim();

  before(async () => {
    t = await buildTestApp({ listen: true });
    await t.core.operators.add('olga', 'cli', 'test');
    // mia: two personal keys and usage in acme; adam: acme's administrator with an organization key; zoe: usage
    const mia = { userId: 'mia', orgRoles: { acme: 'member' } };
    const adam = { userId: 'adam', orgRoles: { acme: 'admin' } };
    const laptop = await t.services.inferenceKeys.create(mia, { name: 'mia laptop' });
    await t.services.inferenceKeys.create(mia, { name: 'mia ci' });
    const acmeKey = await t.services.inferenceKeys.create(adam, { name: 'acme shared', org_id: 'acme' });
    const zoe = await t.services.inferenceKeys.create({ userId: 'zoe', orgRoles: {} }, { name: 'zoe key' });
    await use(t, { keyId: laptop.id, userId: 'mia' }, { model: 'chat-small', cost: 1.25 });
    await use(t, { keyId: acmeKey.id, userId: 'mia', orgId: 'acme' }, { model: 'chat-large', cost: 2 });
    await use(t, { keyId: zoe.id, userId: 'zoe' }, { model: 'chat-small', cost: 0.75 });
    // earlier days, for the chart (records of the days before today, still this month or the last)
    const now = Math.floor(Date.now() / 1000);
    for (const [i, [key, user, cost]] of (
      [
        [laptop.id, 'mia', 0.5],
        [zoe.id, 'zoe', 1],
        [laptop.id, 'mia', 1.5],
        [zoe.id, 'zoe', 0.25],
      ] as const
    ).entries()) {
      await use(t, { keyId: key, userId: user }, { model: 'chat-small', cost, requestId: `old_${i}` });
      await db()
        .updateTable('usage_records')
        .set({ created_at: now - (i + 2) * 3 * 86_400 })
        .where('request_id', '=', `old_${i}`)
        .execute();
    }
    browser = await launchChromium();
    ({ page, problems } = await openPage(browser));
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  test('the first load stays under 150 kB gzip, without the console', async () => {
    const html = await (await fetch(`${t.url}/console/users`)).text();
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]);
    assert.ok(assets.length >= 2);
    assert.ok(!assets.some((a) => a.includes('Console-')), 'the console chunk is not in the HTML');
    let total = html.length;
    for (const a of assets) {
      const res = await fetch(`${t.url}${a}`, { headers: { 'accept-encoding': 'gzip' } });
      total += Number(res.headers.get('content-length') ?? (await res.arrayBuffer()).byteLength);
    }
    assert.ok(total < 150 * 1024, `first load ${total} B gzip`);
  });

  test('an operator finds the Console, loaded as a chunk of its own, and searches users', async () => {
    const chunks: string[] = [];
    page.on('request', (r) => {
      if (r.url().includes('/assets/Console-')) chunks.push(r.url());
    });
    await page.goto(await signInLink(t, 'olga'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.locator('#nav-console').waitFor();
    assert.deepEqual(chunks, [], 'the console is not part of the first load');
    await page.locator('#nav-console').click();
    await page.getByRole('heading', { name: 'Users', level: 1 }).waitFor();
    assert.equal(chunks.length, 1);
    assert.equal(new URL(page.url()).pathname, '/console/users');
    assert.equal(await page.evaluate(() => document.activeElement?.tagName), 'H1', 'the screen’s heading has the focus');
    await page.locator('#users-table tr[data-user-id="zoe"]').waitFor();
    // the list: keys count, balance, usage this month, last activity, as the API has them
    const listed = (await api(page, '/users?per_page=100')).body.data.list as Array<{ user_id: string; keys: { total: number } }>;
    assert.deepEqual(
      (await page.locator('#users-table tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-user-id')))).sort(),
      listed.map((u) => u.user_id).sort(),
    );
    assert.match(await text(page, '#users-table tr[data-user-id="mia"]'), /2 \(2 active, 0 disabled\)/);
    const miaListed = listed.find((u) => u.user_id === 'mia') as unknown as { period: { cost: number }; balance: { balance: number } };
    assert.match(await text(page, '#users-table tr[data-user-id="mia"]'), new RegExp(`\\t${miaListed.balance.balance}\\t${miaListed.period.cost}\\n`));
    await check(page, 'console users');
    await page.locator('#users-search').fill('MI');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('#users-table tbody tr').length === 1);
    assert.equal(await page.locator('#users-table tbody tr').getAttribute('data-user-id'), 'mia');
    await screenshot(page, 'users', false, 'console');
    await page.locator('#users-search').fill('nobody-here');
    await page.keyboard.press('Enter');
    await page.getByText('No user id contains “nobody-here”.').waitFor();
    await check(page, 'console users: no match');
    await page.locator('#users-search').fill('mia');
    await page.keyboard.press('Enter');
    await page.locator('#users-table').getByRole('link', { name: 'mia' }).click();
    await page.getByRole('heading', { name: 'User mia' }).waitFor();
  });

  test("a user's keys: disable all, enable one; the database and the API agree with the page", async () => {
    await page.locator('#user-keys tbody tr').first().waitFor();
    await check(page, 'console user');
    await page.locator('#disable-all').click();
    await page.locator('#keys-all[open]').waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Cancel', 'the confirmation starts on Cancel');
    await check(page, 'console user: confirm disable all');
    await page.locator('#keys-all-yes').click();
    await page.getByText('Keys disabled: 2.').waitFor();
    const rows = await db().selectFrom('api_keys').select(['name', 'status']).where('user_id', '=', 'mia').orderBy('name').execute();
    assert.deepEqual(rows, [
      { name: 'mia ci', status: 'disabled' },
      { name: 'mia laptop', status: 'disabled' },
    ]);
    const shown = await page
      .locator('#user-keys tbody tr')
      .evaluateAll((trs) => trs.map((r) => [r.querySelector('.key-name')!.textContent, r.querySelector('.badge')!.textContent]));
    assert.deepEqual(shown.sort(), [
      ['mia ci', 'disabled'],
      ['mia laptop', 'disabled'],
    ]);
    const viaApi = (await api(page, '/users/mia')).body.data;
    assert.deepEqual(viaApi.keys, { total: 2, active: 0, disabled: 2 });
    await page.getByRole('button', { name: 'Enable mia laptop' }).click();
    await page.getByText('Key “mia laptop” enabled.').waitFor();
    assert.equal((await db().selectFrom('api_keys').select('status').where('name', '=', 'mia laptop').executeTakeFirstOrThrow()).status, 'active');
    await page.locator('#user-keys tr', { hasText: 'mia laptop' }).locator('.badge', { hasText: 'active' }).waitFor();
    await check(page, 'console user: keys changed');
  });

  test('credits granted with a note, and removed; a bad amount is refused in plain words', async () => {
    const before = (await api(page, '/users/mia')).body.data.balance.balance as number;
    await page.locator('#credits-amount').fill('12.5');
    await page.locator('#credits-note').fill('welcome credits');
    await page.locator('#credits-form-submit').click();
    await page.locator('#credits-form .alert.ok').waitFor();
    const grant = await db().selectFrom('credit_grants').selectAll().where('user_id', '=', 'mia').where('note', '=', 'welcome credits').executeTakeFirstOrThrow();
    assert.equal(grant.amount_micros, 12_500_000);
    const after = (await api(page, '/users/mia')).body.data.balance.balance as number;
    assert.equal(after, before + 12.5);
    await page.waitForFunction((v) => document.querySelector('#figure-balance')?.textContent === v, after.toLocaleString('en-US', { maximumFractionDigits: 4 }));
    assert.match(await text(page, '#credits-form .alert.ok'), new RegExp(`12\\.5 credits granted\\. The balance is now ${after}`));
    // over the most one grant may move: the server's rule, in plain words, naming nothing technical
    await page.locator('#credits-amount').fill('2000000000000');
    await page.locator('#credits-form-submit').click();
    await page.locator('#credits-form .alert.error').waitFor();
    assert.doesNotMatch(await text(page, '#credits-form .alert.error strong'), /^(validation_error|HTTP)/);
    await check(page, 'console user: credits error');
    await page.getByLabel('Remove credits').check();
    await page.locator('#credits-amount').fill('2.5');
    await page.locator('#credits-note').fill('correction');
    await page.locator('#credits-form-submit').click();
    await page.getByText(`2.5 credits removed. The balance is now ${after - 2.5}.`).waitFor();
    await screenshot(page, 'user', true, 'console');
  });

  test('budgets: set one per user with a soft limit and a webhook, see it, remove it; one per key, on its owner’s page too', async () => {
    await page.locator('#console-nav-budgets').click();
    await page.getByRole('heading', { name: 'Budgets', level: 1 }).waitFor();
    await page.getByText('No budgets.').waitFor();
    await check(page, 'console budgets: empty');
    await page.locator('#budget-scope').selectOption('user');
    await page.locator('#budget-target').fill('mia');
    await page.locator('#budget-period').selectOption('weekly');
    await page.locator('#budget-limit').fill('50');
    await page.locator('#budget-soft').fill('40');
    await page.locator('#budget-webhook').fill('https://hooks.example/budget');
    await page.locator('#budget-form-submit').click();
    await page.getByText('Budget of mia (weekly) saved.').waitFor();
    const row = await db().selectFrom('budgets').selectAll().where('target', '=', 'mia').executeTakeFirstOrThrow();
    assert.deepEqual([row.scope, row.period, row.limit_micros, row.soft_micros, row.webhook_url], ['user', 'weekly', 50_000_000, 40_000_000, 'https://hooks.example/budget']);
    const tr = page.locator(`#budgets-table tr[data-budget-id="${row.id}"]`);
    await tr.waitFor();
    const listed = (await api(page, '/budgets')).body.data.list[0];
    assert.match(await tr.innerText(), new RegExp(`weekly[\\s\\S]*${listed.spent}[\\s\\S]*50[\\s\\S]*40[\\s\\S]*hooks\\.example`));
    // a soft limit over the limit: refused, said plainly
    await page.locator('#budget-target').fill('mia');
    await page.locator('#budget-limit').fill('5');
    await page.locator('#budget-soft').fill('9');
    await page.locator('#budget-form-submit').click();
    await page.locator('#budget-form .alert.error').waitFor();
    await check(page, 'console budgets: listed, with an error');
    await screenshot(page, 'budgets', true, 'console');
    await tr.getByRole('button', { name: /^Remove the budget/ }).click();
    await page.locator('#budget-remove[open]').waitFor();
    await page.locator('#budget-remove-yes').click();
    await page.getByText('No budgets.').waitFor();
    assert.equal((await db().selectFrom('budgets').select('id').execute()).length, 0);
    // one key's budget: listed on the budgets screen and on its owner's page
    const laptop = await db().selectFrom('api_keys').select('id').where('name', '=', 'mia laptop').executeTakeFirstOrThrow();
    await page.locator('#budget-scope').selectOption('key');
    await page.locator('#budget-target').fill(laptop.id);
    await page.locator('#budget-period').selectOption('daily');
    await page.locator('#budget-limit').fill('3');
    await page.locator('#budget-soft').fill('');
    await page.locator('#budget-form-submit').click();
    await page.locator('#budgets-table tbody tr', { hasText: laptop.id }).waitFor();
    const keyBudget = await db().selectFrom('budgets').selectAll().where('target', '=', laptop.id).executeTakeFirstOrThrow();
    assert.deepEqual([keyBudget.scope, keyBudget.period, keyBudget.limit_micros, keyBudget.soft_micros, keyBudget.webhook_url], ['key', 'daily', 3_000_000, null, null]);
    await page.locator('#console-nav-users').click();
    await page.locator('#users-table').getByRole('link', { name: 'mia' }).click();
    await page.locator(`#user-budgets tr[data-budget-id="${keyBudget.id}"]`).waitFor();
    await check(page, 'console user with a key budget');
  });

  test('operators: add one, listed as the database has it, remove it; removing oneself is refused in plain words', async () => {
    // by keyboard: the console's navigation, then the screen's heading has the focus
    await page.locator('#console-nav-operators').focus();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Operators', level: 1 }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Operators');
    assert.equal(await page.locator('#console-nav-operators').getAttribute('aria-current'), 'page');
    await page.locator('#operators-table tr[data-user-id="olga"]').waitFor();
    await page.locator('#operator-user').focus();
    await page.keyboard.type('nina');
    await page.keyboard.press('Enter');
    await page.getByText('nina is now an operator.').waitFor();
    const rec = await db().selectFrom('operators').selectAll().where('user_id', '=', 'nina').executeTakeFirstOrThrow();
    assert.deepEqual([rec.source, rec.added_by], ['api', 'olga']);
    await page.locator('#operators-table tr[data-user-id="nina"]', { hasText: 'the console or the API' }).waitFor();
    assert.equal((await api(page, '/operators')).body.data.list.length, await page.locator('#operators-table tbody tr').count());
    await page.getByRole('button', { name: 'Remove operator olga' }).click();
    await page.locator('#operator-remove-yes').click();
    await page.locator('#operator-remove .alert.error').waitFor();
    await check(page, 'console operators: removing oneself refused');
    // the refusal keeps the keyboard in the dialog (the pressed button was disabled while it ran)
    await waitFor(() => page.evaluate(() => document.activeElement?.closest('dialog')?.id === 'operator-remove'), { what: 'the focus in the dialog after the refusal' });
    await page.keyboard.press('Escape');
    await waitFor(async () => (await page.locator('dialog[open]').count()) === 0, { what: 'the dialog closed by Escape' });
    await screenshot(page, 'operators', false, 'console');
    await page.getByRole('button', { name: 'Remove operator nina' }).click();
    await page.locator('#operator-remove-yes').click();
    await page.getByText('nina is no longer an operator.').waitFor();
    assert.equal(await db().selectFrom('operators').select('user_id').where('user_id', '=', 'nina').executeTakeFirst(), undefined);
    assert.equal(await page.locator('#operators-table tr[data-user-id="nina"]').count(), 0);
    assert.equal((await api(page, '/operators')).body.data.list.length, 1);
  });

  test('the audit log shows who did what, when, before and after, as the API has it', async () => {
    await page.locator('#console-nav-audit').click();
    await page.getByRole('heading', { name: 'Audit log', level: 1 }).waitFor();
    await page.locator('#audit-table tbody tr').first().waitFor();
    const viaApi = (await api(page, '/audit?per_page=25')).body.data;
    const shown = await page.locator('#audit-table tbody tr').evaluateAll((trs) => trs.map((r) => r.getAttribute('data-action')));
    assert.deepEqual(
      shown,
      viaApi.list.map((e: { action: string }) => e.action),
    );
    for (const a of ['credits.grant', 'credits.remove', 'key.disable', 'key.enable', 'budget.set', 'budget.remove', 'operator.add', 'operator.remove'])
      assert.ok(shown.includes(a), a);
    const grant = page.locator('#audit-table tr[data-action="credits.grant"]');
    assert.match(await grant.innerText(), /olga[\s\S]*credits granted[\s\S]*user:mia/);
    await check(page, 'console audit');
    await page.locator('#audit-action').selectOption('key.disable');
    await page.getByRole('button', { name: 'Find' }).click();
    await page.waitForFunction(() => [...document.querySelectorAll('#audit-table tbody tr')].every((r) => r.getAttribute('data-action') === 'key.disable'));
    assert.equal(await page.locator('#audit-table tbody tr').count(), 2);
    assert.match(await page.locator('#audit-table tbody tr').first().innerText(), /status\s+active[\s\S]*status\s+disabled/);
    await screenshot(page, 'audit', false, 'console');
  });

  test('usage of everyone grouped by user and by key, with a chart; totals as the API has them', async () => {
    await page.locator('#console-nav-usage').click();
    await page.getByRole('heading', { name: 'Usage of everyone' }).waitFor();
    await page.locator('#cu-chart').waitFor();
    await page.locator('#cu-group').selectOption('user');
    await page.locator('#cu-show').click();
    await page.locator('#cu-table tbody tr', { hasText: 'zoe' }).waitFor();
    const byUser = await page.locator('#cu-table tbody tr').evaluateAll((trs) => trs.map((r) => [r.querySelector('th')!.textContent, r.lastElementChild!.textContent]));
    assert.deepEqual(byUser, [
      ['mia', '5.25'],
      ['zoe', '2'],
    ]);
    const viaApi = (await api(page, '/usage?group_by=user')).body.data;
    assert.equal(viaApi.total.cost, 7.25);
    assert.equal(await page.locator('#cu-totals .stat').first().locator('.value').innerText(), '7.25');
    assert.match((await page.locator('#cu-chart svg[role=img]').getAttribute('aria-label'))!, /mia 5\.25, zoe 2$/);
    await check(page, 'console usage by user');
    await screenshot(page, 'usage', true, 'console');
    await page.locator('#cu-group').selectOption('key');
    await page.locator('#cu-show').click();
    await page.locator('#cu-table tbody tr', { hasText: 'acme shared (adam)' }).waitFor();
    await page.getByLabel('Requests').check();
    assert.match((await page.locator('#cu-chart figcaption').innerText()).trim(), /^Requests by key$/);
  });

  test('organizations: members with roles, keys, balance; a role change the identity provider owns is said plainly', async () => {
    await page.locator('#console-nav-orgs').click();
    await page.getByRole('heading', { name: 'Organisations', level: 1 }).waitFor();
    await page.locator('#orgs-table tr[data-org-id="acme"]').getByRole('link', { name: 'acme' }).click();
    await page.getByRole('heading', { name: 'Organisation acme' }).waitFor();
    await page.locator('#org-members tbody tr').first().waitFor();
    const viaApi = (await api(page, '/orgs/acme')).body.data;
    const members = await page.locator('#org-members tbody tr').evaluateAll((trs) => trs.map((r) => [r.getAttribute('data-user-id'), r.querySelector('.badge')!.textContent]));
    assert.deepEqual(
      members,
      viaApi.member_list.map((m: { user_id: string; role: string }) => [m.user_id, m.role === 'admin' ? 'administrator' : 'member']),
    );
    assert.deepEqual(members, [
      ['adam', 'administrator'],
      ['mia', 'member'],
    ]);
    assert.equal(await page.locator('#org-keys tbody tr').count(), viaApi.api_keys.length);
    await check(page, 'console org');
    // PUT /orgs/{org}/members/{user} answers 409 roles_from_identity_provider where the provider owns the roles
    await page.route('**/v1/admin/orgs/acme/members/mia', (route) =>
      route.fulfill({
        status: 409,
        contentType: 'application/json',
        body: JSON.stringify({
          data: null,
          meta: { code: 40903, error: 'roles_from_identity_provider', message: 'Roles in acme come from the identity provider: change them there', request_id: 'req_test' },
        }),
      }),
    );
    await page.getByRole('button', { name: 'Make administrator: mia' }).click();
    // the server's sentence in the page's language; our own for the code when it is not
    await page.locator('#org-members').page().getByText('Roles in acme come from the identity provider: change them there.').waitFor();
    await check(page, 'console org: role refused');
    await page.locator('#language').selectOption('zh');
    await page.getByRole('button', { name: '设为管理员：mia' }).click();
    await page.getByText('此组织的角色由身份提供方提供：请在身份提供方处更改，而不是在 Portico 中。').waitFor();
    await page.locator('#language').selectOption('en');
    await check(page, 'console org: role refused');
    await page.unroute('**/v1/admin/orgs/acme/members/mia');
    await screenshot(page, 'org', true, 'console');
  });

  test('every console screen in Chinese', async () => {
    await page.locator('#language').selectOption('zh');
    const screens: Array<[string, string]> = [
      ['users', '用户'],
      ['orgs', '组织'],
      ['usage', '全部用量'],
      ['budgets', '预算'],
      ['audit', '审计日志'],
      ['operators', '运维人员'],
      ['models', '模型'],
      ['health', '健康状态'],
      ['requests', '请求'],
    ];
    for (const [id, title] of screens) {
      await page.locator(`#console-nav-${id}`).click();
      await page.getByRole('heading', { name: title, level: 1 }).waitFor();
      assert.match(await page.title(), / · 控制台 · Portico$/);
      await check(page, `console ${id} in Chinese`);
    }
    await page.locator('#console-nav-users').click();
    await page.locator('#users-table').getByRole('link', { name: 'mia' }).click();
    await page.getByRole('heading', { name: '用户 mia' }).waitFor();
    await page.getByRole('heading', { name: /^密钥（2）$/ }).waitFor();
    await page.locator('#credits-amount').fill('2000000000000');
    await page.locator('#credits-form-submit').click();
    await page.locator('#credits-form .alert.error').waitFor();
    assert.match(await text(page, '#credits-form .alert.error strong'), /[\u4e00-\u9fff]/, 'the error in Chinese');
    await check(page, 'console user in Chinese, with an error');
    await screenshot(page, 'user-zh', false, 'console');
    await page.locator('#language').selectOption('en');
    assert.deepEqual(problems, []);
  });

  test('on a phone: the navigation wraps above the screen, nothing is wider than the screen', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    for (const path of ['/console/users', '/console/users/mia', '/console/orgs/acme', '/console/usage', '/console/budgets', '/console/audit', '/console/operators']) {
      await page.evaluate((p) => {
        history.pushState(null, '', p);
        dispatchEvent(new PopStateEvent('popstate'));
      }, path);
      await page.locator('.console-screen h1').waitFor();
      await page.waitForLoadState('networkidle');
      assert.equal(await overflow(), 0, `${path} is wider than the screen`);
    }
    await page.locator('#console-nav-users').click();
    await page.locator('#users-table').waitFor();
    await check(page, 'console users on a phone');
    await screenshot(page, 'phone-users', false, 'console');
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  for (const who of [
    { id: 'mia', roles: { acme: 'member' }, what: 'a member' },
    { id: 'adam', roles: { acme: 'admin' }, what: "an organization's administrator" },
  ]) {
    test(`${who.what}: no Console link, the console's address says "not an operator", the admin API answers 403`, async () => {
      const c = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' });
      const p = await c.newPage();
      const pp = watchConsole(p);
      const chunks: string[] = [];
      p.on('request', (r) => {
        if (r.url().includes('/assets/Console-')) chunks.push(r.url());
      });
      await p.goto(await signInLink(t, who.id, who.roles));
      await p.getByRole('heading', { name: 'API keys' }).waitFor();
      assert.equal((await api(p, '/whoami')).status, 403);
      assert.equal((await api(p, '/users')).status, 403);
      assert.equal(await p.locator('#nav-console').count(), 0);
      assert.equal(await p.getByRole('link', { name: 'Console' }).count(), 0);
      await p.goto(`${t.url}/console/users`);
      await p.getByRole('heading', { name: 'Not an operator' }).waitFor();
      assert.equal(await p.locator('#nav-console').count(), 0);
      assert.equal(await p.locator('.console-nav').count(), 0);
      assert.deepEqual(chunks, [], 'the console chunk is never loaded');
      a11y.push(...(await axeViolations(p, `not an operator (${who.id})`)));
      if (who.id === 'mia') {
        await screenshot(p, 'denied', false, 'console');
        await p.locator('#language').selectOption('zh');
        await p.getByRole('heading', { name: '您不是运维人员' }).waitFor();
        a11y.push(...(await axeViolations(p, 'not an operator in Chinese')));
      }
      assert.deepEqual(pp, []);
      await c.close();
    });
  }

  test('axe-core found no violation in any state', () => {
    assert.deepEqual(a11y, []);
  });
});
