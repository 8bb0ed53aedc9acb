/**
 * OpenID Connect sign-in against a real provider (oidc-provider) started here, driven in Chromium: the provider's
 * login form, consent, the code exchange with PKCE, the ID token checked against the provider's JWKS, the org roles
 * of its claims applied; and what a person sees when the provider says no or the callback is tampered with.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { freePort, startIdp, type TestIdp } from '../helpers/idp.js';
import { launchChromium, screenshot, watchConsole } from '../helpers/browser.js';

describe('OpenID Connect sign-in in Chromium', () => {
  let t: TestApp;
  let idp: TestIdp;
  let browser: Browser;
  let url: string;

  before(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    idp = await startIdp(`${url}/auth/oidc/callback`);
    idp.roles.olivia = { acme: 'admin' };
    t = await buildTestApp({
      env: { PUBLIC_URL: url, OIDC_ISSUER: idp.issuer, OIDC_CLIENT_ID: idp.clientId, OIDC_CLIENT_SECRET: idp.clientSecret, OIDC_SCOPES: 'openid' },
    });
    await t.app.listen({ port, host: '127.0.0.1' });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    await idp?.close();
  });

  const signInAt = async (page: Page, login: string) => {
    await page.goto(`${url}/signin`);
    await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
    await page.waitForURL((u) => u.href.startsWith(idp.issuer));
    return page.locator('input[name=login]').fill(login);
  };

  test('the identity provider signs a person in; its org roles apply; no code or token stays in the address bar', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await ctx.newPage();
    const problems = watchConsole(page);
    await page.goto(`${url}/signin`);
    await page.getByRole('heading', { name: 'Your organisation’s account' }).waitFor();
    await screenshot(page, 'signin-oidc');
    await signInAt(page, 'olivia');
    await page.locator('input[name=password]').fill('any password');
    await screenshot(page, 'oidc-provider');
    await page.locator('button[type=submit]').click();
    await page.locator('button[type=submit]', { hasText: 'Continue' }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    assert.equal(new URL(page.url()).pathname, '/keys');
    assert.equal(new URL(page.url()).search, '', 'the code and state left the address bar');
    assert.equal(await page.locator('.who .user').innerText(), 'olivia');
    const session = await page.evaluate(() => fetch('/v1/portal/session').then((r) => r.json()));
    assert.equal(session.data.method, 'oidc');
    assert.deepEqual(session.data.org_roles, { acme: 'admin' });
    const cookies = await ctx.cookies();
    assert.equal(cookies.find((c) => c.name === 'portico_session')?.httpOnly, true);
    assert.equal(
      cookies.find((c) => c.name === 'portico_oidc'),
      undefined,
      'the transaction cookie is gone',
    );
    // the IdP's admin role lets her create an organisation key from the page
    await page.locator('#create-key').click();
    await page.locator('#create-dialog').getByLabel('Name').fill('team key');
    await page.locator('#create-dialog').getByLabel('Organisation').selectOption('acme');
    await page.locator('#create-dialog').getByRole('button', { name: 'Create key' }).click();
    await page.locator('#created-dialog').getByText('It will not be shown again').waitFor();
    assert.deepEqual(problems, []);
    await ctx.close();
  });

  test('the authorization request uses PKCE S256, state and nonce; a replayed or forged callback is refused', async () => {
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    const start = await page.request.get(`${url}/auth/oidc/login`, { maxRedirects: 0 });
    assert.equal(start.status(), 303);
    const to = new URL(start.headers()['location']);
    assert.equal(to.origin, idp.issuer);
    assert.equal(to.searchParams.get('code_challenge_method'), 'S256');
    assert.match(to.searchParams.get('code_challenge')!, /^[\w-]{43}$/);
    assert.ok(to.searchParams.get('state') && to.searchParams.get('nonce'));
    assert.equal(to.searchParams.get('client_id'), idp.clientId);
    assert.equal(to.searchParams.get('redirect_uri'), `${url}/auth/oidc/callback`);
    assert.match(String(start.headers()['set-cookie']), /portico_oidc=[^;]+; Path=\/auth\/oidc; Max-Age=600; HttpOnly; SameSite=Lax/);
    assert.ok(!/code_verifier/.test(to.search), 'the verifier stays with Portico');

    // a full sign-in, watching the callback
    let callback = '';
    page.on('request', (r) => {
      if (r.url().startsWith(`${url}/auth/oidc/callback`)) callback = r.url();
    });
    await signInAt(page, 'peter');
    await page.locator('input[name=password]').fill('x');
    await page.locator('button[type=submit]').click();
    await page.locator('button[type=submit]', { hasText: 'Continue' }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    assert.match(callback, /[?&]code=/);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByText('You are signed out.').waitFor();
    // the same callback again (its code is spent, its transaction cookie gone): back to sign-in with a message
    await page.goto(callback);
    await page.getByText('Signing in with your identity provider did not succeed').waitFor();
    // a forged state with a fresh transaction: refused too
    await page.request.get(`${url}/auth/oidc/login`, { maxRedirects: 0 });
    await page.goto(`${url}/auth/oidc/callback?code=forged&state=forged`);
    await page.getByText('Signing in with your identity provider did not succeed').waitFor();
    // the provider refusing (the person cancels): the same message
    await page.goto(`${url}/auth/oidc/callback?error=access_denied&state=x`);
    await page.getByText('Signing in with your identity provider did not succeed').waitFor();
    await ctx.close();
  });

  test('a provider that cannot be reached: Portico still starts and says so on the sign-in page', async () => {
    const down = await buildTestApp({ env: { PUBLIC_URL: 'http://127.0.0.1:1', OIDC_ISSUER: 'http://127.0.0.1:9', OIDC_CLIENT_ID: 'portico' } });
    try {
      const res = await down.app.inject({ url: '/auth/oidc/login' });
      assert.equal(res.statusCode, 303);
      assert.equal(res.headers.location, '/signin?error=oidc_unavailable');
      assert.deepEqual((await down.app.inject({ url: '/v1/portal/session/methods' })).json().data, { link: true, oidc: true, oidc_login_url: '/auth/oidc/login' });
    } finally {
      await down.close();
    }
  });
});
