/**
 * An organization role changed on the operator's console where roles are Portico's own (no JWT_SECRET, JWKS or
 * OpenID Connect: Portico signs its sign-in links), against the real PUT /v1/admin/orgs/{org}/members/{user}: the
 * page, the admin API, the database and the member's own session agree at once; in English and in Chinese; axe-core
 * on each new state. (Where an identity provider owns the roles, the page's refusal is tested in
 * console.browser.test.ts, the API's in test/admin/org-roles.*.)
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { launchChromium, openPage, signInLink } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { use } from '../admin/helpers.js';

describe("the console's organization roles, where they are Portico's own", () => {
  let t: TestApp & { url?: string };
  let browser: Browser;
  let op: Page;
  let mia: Page;
  /** each page's errors and failed CSP checks (watchConsole fills them as they come) */
  const pages: string[][] = [];
  const a11y: string[] = [];

  /** what the admin API says of acme's members, from inside the operator's page (its session) */
  const members = async () =>
    (
      await op.evaluate(async () => {
        const res = await fetch('/v1/admin/orgs/acme', { credentials: 'same-origin' });
        return (await res.json()).data.member_list as Array<{ user_id: string; role: string }>;
      })
    ).map((m) => [m.user_id, m.role]);
  const stored = async (user: string) =>
    (await t.services.db.db.selectFrom('org_members').select('role').where('org_id', '=', 'acme').where('user_id', '=', user).executeTakeFirst())?.role;
  /** mia's own view of herself: GET /v1/portal/me through her session */
  const miaAdminOrgs = () =>
    mia.evaluate(async () => {
      const res = await fetch('/v1/portal/me', { credentials: 'same-origin' });
      return (await res.json()).data.admin_orgs as string[];
    });

  before(async () => {
    t = await buildTestApp({ listen: true, env: { JWT_SECRET: '' } });
    assert.equal(t.config.jwt.secretGenerated, true, 'Portico signs its own tokens: roles are its own');
    await t.core.operators.add('olga', 'cli', 'test');
    // acme: adam its administrator (an organization key), mia a member who used it
    const adam = await t.services.inferenceKeys.create({ userId: 'adam', orgRoles: { acme: 'admin' } }, { name: 'acme shared', org_id: 'acme' });
    await use(t, { keyId: adam.id, userId: 'mia', orgId: 'acme' }, { cost: 1 });
    browser = await launchChromium();
    const page = async (user: string, roles: Record<string, string> = {}) => {
      const { page: p, problems: seen } = await openPage(browser);
      pages.push(seen);
      await p.goto(await signInLink(t, user, roles));
      await p.getByRole('heading', { name: 'API keys' }).waitFor();
      return p;
    };
    op = await page('olga');
    mia = await page('mia', { acme: 'member' });
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  test('the operator makes mia an administrator, then a member again; page, API, database and her session agree', async () => {
    await op.goto(`${t.url}/console/orgs/acme`);
    await op.getByRole('heading', { name: 'Organisation acme' }).waitFor();
    const badge = op.locator('#org-members tr[data-user-id="mia"] .badge');
    assert.equal(await badge.innerText(), 'member');
    assert.deepEqual(await miaAdminOrgs(), []);

    await op.getByRole('button', { name: 'Make administrator: mia' }).click();
    await op.getByRole('button', { name: 'Make member: mia' }).waitFor();
    assert.equal(await badge.innerText(), 'administrator');
    assert.deepEqual(await members(), [
      ['adam', 'admin'],
      ['mia', 'admin'],
    ]);
    assert.equal(await stored('mia'), 'admin');
    assert.deepEqual(await miaAdminOrgs(), ['acme'], "her session says so at once, though her link said 'member'");
    a11y.push(...(await axeViolations(op, 'console org: role changed')));

    // back, in Chinese
    await op.locator('#language').selectOption('zh');
    await op.getByRole('button', { name: '设为成员：mia' }).click();
    await op.getByRole('button', { name: '设为管理员：mia' }).waitFor();
    assert.equal(await badge.innerText(), '成员');
    assert.deepEqual(await members(), [
      ['adam', 'admin'],
      ['mia', 'member'],
    ]);
    assert.equal(await stored('mia'), 'member');
    assert.deepEqual(await miaAdminOrgs(), []);
    a11y.push(...(await axeViolations(op, 'console org: role changed (zh)')));

    // the change is in the audit log, with the operator and before/after
    const audit = await t.services.db.db.selectFrom('audit_log').selectAll().where('action', '=', 'org.member.role').orderBy('id').execute();
    assert.equal(audit.length, 2);
    assert.deepEqual(
      audit.map((a) => a.actor),
      ['olga', 'olga'],
    );
    assert.deepEqual(a11y, []);
    assert.deepEqual(pages.flat(), []);
  });
});
