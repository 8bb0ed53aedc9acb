/**
 * The operator's console's Models, Health and Requests screens in a real Chromium, against the real admin API and a
 * scripted OpenAI-compatible upstream: a model added on the page is tested, edited, called through /v1 with a key,
 * seen on the health screen and in the request list, disabled (404 to clients) and removed; what the page shows is
 * checked against the admin API and the database; the upstream key is never in the page or in any answer after it
 * was saved. axe-core on each new state; English and Chinese. One browser, one signed-in page for the file.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Page, Response as PwResponse } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { bearer } from '../admin/helpers.js';
import { quietFor, waitFor } from '../helpers/wait.js';

/** the stored model's upstream key: it goes in once, through the form, and must never come back */
const SECRET = 'sk-upstream-VERY-secret-0123456789';

describe("the console's Models, Health and Requests screens in Chromium", () => {
  let t: TestApp & { url?: string };
  let up: ScriptedUpstream;
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  let operator: Record<string, string>;
  let key = '';
  /** every admin answer the page received, as text: the secret must be in none of them */
  const answers: string[] = [];
  const a11y: string[] = [];
  const check = async (state: string) => a11y.push(...(await axeViolations(page, state)));
  /** the page as a person and a script could read it: its markup and every field's value */
  const pageText = () =>
    page.evaluate(() => document.documentElement.outerHTML + [...document.querySelectorAll('input, textarea, select')].map((e) => (e as HTMLInputElement).value).join('\n'));
  const adminGet = async (path: string) => {
    const res = await t.app.inject({ method: 'GET', url: `/v1/admin${path}`, headers: operator });
    assert.equal(res.statusCode, 200, res.body);
    assert.ok(!res.body.includes(SECRET), `the key is not in GET ${path}`);
    return res.json().data;
  };
  const call = (model: string, input: string) =>
    fetch(`${t.url}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model, input }) });
  /** the stored model's row in the database (migration 0014_stored_models) */
  const dbRow = (name: string) => t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', name).executeTakeFirst();
  const modelRow = (name: string) => page.locator(`#models-table tr[data-model="${name}"]`);
  const status = (text: string | RegExp) => page.getByRole('status').filter({ hasText: text }).waitFor();

  before(async () => {
    up = await startScriptedUpstream();
    const models = [{ name: 'file-chat', provider: 'openai-compatible', type: 'text', base_url: up.url, upstream_model: 'tiny' } as ModelSpec];
    t = await buildTestApp({ listen: true, models, builtins: false });
    await t.core.operators.add('olga', 'cli', 'test');
    operator = bearer(await t.token('olga'));
    key = await t.inferenceKey('alice');
    browser = await launchChromium();
    ({ ctx, page, problems } = await openPage(browser));
    ctx.setDefaultTimeout(15_000);
    page.on('response', (r: PwResponse) => {
      if (new URL(r.url()).pathname.startsWith('/v1/admin/'))
        void r.text().then(
          (b) => answers.push(b),
          () => {},
        );
    });
    await page.goto(await signInLink(t, 'olga'));
    await page.locator('#nav-console').waitFor();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    await up?.close();
  });

  test('models: every model with its source; a file model is read-only and can be tested', async () => {
    await page.goto(`${t.url}/console/models`);
    await page.getByRole('heading', { name: 'Models' }).waitFor();
    const file = modelRow('file-chat');
    await file.waitFor();
    assert.match(await file.innerText(), /from file/);
    assert.match(await file.innerText(), /Read-only: change it in the model file\./);
    assert.equal(await file.getByRole('button', { name: /Edit|Disable|Enable|Remove/ }).count(), 0, 'no edit controls on a model from the file');
    up.script({ text: 'file model here' });
    await file.getByRole('button', { name: 'Test deployment file-chat' }).click();
    await file.locator('.test-result').getByText('file model here').waitFor();
    assert.match(await file.locator('.test-result').innerText(), /Answered in \d+ ms/);
    await check('models list with a test answer');
  });

  test('models: add a stored model with the form (a server check message first), test it, its key is never shown', async () => {
    // by keyboard: the button opens the dialog at its first field
    await page.locator('#add-model').focus();
    await page.keyboard.press('Enter');
    const dialog = page.locator('#model-dialog');
    await dialog.getByRole('heading', { name: 'Add a model' }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'model-name');
    await page.keyboard.type('page-chat');
    await dialog.getByLabel('Input, per million tokens', { exact: true }).fill('1');
    await dialog.getByLabel('Output, per million tokens', { exact: true }).fill('2');
    await dialog.getByLabel('Deployment id', { exact: true }).fill('pc-main');
    await dialog.getByLabel('Base URL', { exact: true }).fill(up.url);
    await dialog.getByLabel('Upstream model', { exact: true }).fill('tiny');
    await dialog.getByLabel('Upstream API key', { exact: true }).fill(SECRET);
    await dialog.getByLabel('Requests a minute (rpm)', { exact: true }).fill('600');
    await dialog.getByLabel('Tokens a minute (tpm)', { exact: true }).fill('100000');
    // the deployments list: one more, then removed again
    await dialog.getByRole('button', { name: 'Add a deployment' }).click();
    assert.equal(await dialog.locator('fieldset.deployment').count(), 2);
    await dialog.getByRole('button', { name: 'Remove deployment 2' }).click();
    assert.equal(await dialog.locator('fieldset.deployment').count(), 1);
    // a key the model file does not know: the server's check says so, next to the form, with its guess
    await dialog.locator('summary', { hasText: 'More keys of the model' }).click();
    await dialog.locator('#model-other').fill('{"context_windw": 4096}');
    await dialog.getByRole('button', { name: 'Add model' }).click();
    const refusal = dialog.getByRole('alert');
    await refusal.waitFor();
    assert.match(await refusal.innerText(), /context_windw/);
    assert.match(await refusal.innerText(), /did you mean/i);
    await check('add dialog with the server check message');
    // not JSON: the page says so before asking
    await dialog.locator('#model-other').fill('context_window: 4096');
    await dialog.getByRole('button', { name: 'Add model' }).click();
    await dialog.getByText('is not a JSON object').waitFor();
    await dialog.locator('#model-other').fill('');
    await dialog.getByRole('button', { name: 'Add model' }).click();
    await status('Model “page-chat” added');
    assert.equal(await page.locator('dialog[open]').count(), 0);
    const row = modelRow('page-chat');
    assert.match(await row.innerText(), /stored/);
    assert.match(await row.innerText(), /enabled/);
    assert.match(await row.innerText(), /pc-main/);

    // the API agrees, and says a key is set without the key
    const item = (await adminGet('/models')).list.find((m: any) => m.name === 'page-chat');
    assert.equal(item.source, 'stored');
    assert.equal(item.read_only, false);
    assert.equal(item.enabled, true);
    assert.deepEqual(item.secrets, { api_key: true });
    assert.equal(item.entry.base_url, up.url);
    assert.equal(item.entry.upstream_model, 'tiny');
    assert.deepEqual(item.entry.pricing, { input_per_million: 1, output_per_million: 2 });
    assert.equal(item.entry.api_key, undefined);
    // and so does the database: the entry as the page wrote it, the key sealed, not in clear
    const stored = (await dbRow('page-chat'))!;
    assert.deepEqual(JSON.parse(stored.entry), {
      name: 'page-chat',
      type: 'text',
      pricing: { input_per_million: 1, output_per_million: 2 },
      id: 'pc-main',
      provider: 'openai-compatible',
      base_url: up.url,
      upstream_model: 'tiny',
      rpm: 600,
      tpm: 100000,
    });
    assert.deepEqual(Object.keys(JSON.parse(stored.secrets)), ['api_key']);
    assert.ok(!JSON.stringify(stored).includes(SECRET), 'the key is not in the database in clear');
    assert.equal(stored.enabled, true);
    assert.equal(stored.updated_by, 'olga');

    // Test: the answer, its latency; the upstream got the stored key
    up.script({ text: 'Pong from upstream' });
    await row.getByRole('button', { name: 'Test deployment pc-main' }).click();
    await row.locator('.test-result').getByText('Pong from upstream').waitFor();
    assert.match(await row.locator('.test-result').innerText(), /Answered in \d+ ms/);
    assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET}`);
    // a failing upstream: the error, still a result
    up.script({ status: 500, errorMessage: 'the upstream is on fire' });
    await row.getByRole('button', { name: 'Test deployment pc-main' }).click();
    await row
      .locator('.test-result')
      .getByText(/Failed after \d+ ms/)
      .waitFor();
    await check('a failed test');
    const usage = await adminGet('/usage?model=page-chat');
    assert.equal(usage.total.requests, 0, 'a test is charged to nobody');
    await screenshot(page, 'models', true, 'console');
    assert.ok(!(await pageText()).includes(SECRET), 'the key is not in the page');
  });

  test('models: edit the stored model; an empty key field keeps the key, and the field never shows it', async () => {
    const row = modelRow('page-chat');
    await row.getByRole('button', { name: 'Edit page-chat' }).click();
    const dialog = page.locator('#model-dialog');
    await dialog.getByRole('heading', { name: 'Edit “page-chat”' }).waitFor();
    const keyField = dialog.getByLabel('Upstream API key', { exact: true });
    assert.equal(await keyField.inputValue(), '', 'the key field is empty');
    assert.equal(await keyField.getAttribute('type'), 'password');
    assert.match(await dialog.locator('#' + (await keyField.getAttribute('aria-describedby'))).innerText(), /A key is stored/);
    assert.equal(await dialog.getByLabel('Upstream model', { exact: true }).inputValue(), 'tiny');
    assert.equal(await dialog.getByLabel('Name', { exact: true }).isEditable(), false, 'the name is fixed');
    assert.ok(!(await pageText()).includes(SECRET));
    await check('edit dialog with a stored key');
    await dialog.getByLabel('Upstream model', { exact: true }).fill('tiny-2');
    await dialog.getByLabel('Output, per million tokens', { exact: true }).fill('3');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await status('Model “page-chat” saved');
    const item = (await adminGet('/models')).list.find((m: any) => m.name === 'page-chat');
    assert.equal(item.entry.upstream_model, 'tiny-2');
    assert.deepEqual(item.entry.pricing, { input_per_million: 1, output_per_million: 3 });
    assert.deepEqual(item.secrets, { api_key: true }, 'the key is kept');
    assert.equal(item.updated_by, 'olga');
    assert.match(await row.innerText(), /Changed .* by olga/);
    const stored = (await dbRow('page-chat'))!;
    assert.equal(JSON.parse(stored.entry).upstream_model, 'tiny-2');
    assert.deepEqual(Object.keys(JSON.parse(stored.secrets)), ['api_key'], 'the sealed key is kept');
  });

  test('health: the deployment, its request counted after a call, updated without a reload; instances expand', async () => {
    const healthCalls: number[] = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/v1/admin/health') healthCalls.push(Date.now());
    });
    await page.locator('#console-nav-health').click();
    await page.getByRole('heading', { name: 'Health' }).waitFor();
    const body = page.locator('#health-table tbody[data-deployment="pc-main"]');
    await body.waitFor();
    const requestsCell = body.locator('tr.deployment-row td').nth(1);
    const before = Number((await requestsCell.innerText()).split('\n')[0]);
    assert.match(await body.locator('.badge').first().innerText(), /Closed: serving/);
    const updated = await page.locator('#health-updated').innerText();
    assert.match(updated, /Last updated \d\d:\d\d:\d\d/);
    const columns = async () => page.locator('#health-table thead th').evaluateAll((ths) => ths.map((th) => Math.round(th.getBoundingClientRect().width)));
    const widths = await columns();

    // a call through /v1 with a key: served by the stored model
    up.script({ text: 'Served by the stored model.' });
    const res = await call('page-chat', 'Hello, stored model');
    assert.equal(res.status, 200);
    const answer = await res.json();
    assert.equal(answer.output[0].content[0].text, 'Served by the stored model.');
    assert.equal(up.requests.at(-1)!.body.model, 'tiny-2', 'the edited upstream model');
    assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${SECRET}`, 'the kept key');

    // the screen counts it at its next refresh, without a reload
    const navigations: string[] = [];
    page.on('framenavigated', (f) => navigations.push(f.url()));
    await waitFor(async () => Number((await requestsCell.innerText()).split('\n')[0]) === before + 1, { what: 'the call counted on the health screen' });
    assert.deepEqual(navigations, [], 'no reload');
    assert.notEqual(await page.locator('#health-updated').innerText(), updated, '"last updated" moved');
    assert.deepEqual(await columns(), widths, 'the columns did not move');
    // used against its limit: the figures and a bar
    const rpm = body.locator('tr.deployment-row td').nth(6);
    assert.match(await rpm.innerText(), /^1 \/ 600/);
    assert.equal(await rpm.locator('svg.load-bar').count(), 1);

    // the instances of a deployment, kept open across refreshes
    const expander = body.getByRole('button', { name: 'Show the instances of pc-main' });
    await expander.focus();
    await page.keyboard.press('Enter');
    await body.getByRole('button', { name: 'Hide the instances of pc-main' }).waitFor();
    assert.equal(await body.locator('tr.instance-row:visible').count(), 1, 'one instance in this test');
    const polls = healthCalls.length;
    await waitFor(() => healthCalls.length >= polls + 1, { what: 'a refresh' });
    assert.equal(await body.locator('tr.instance-row:visible').count(), 1, 'still open after a refresh');
    await check('health with its instances open');
    await screenshot(page, 'health', true, 'console');

    // every 3 s while shown (the gaps between the refreshes made so far on this screen: the first, the one that
    // counted the call, the one with the instances open; each is timed from the end of the one before); none while
    // the tab is hidden; at once when it is shown again
    await waitFor(() => healthCalls.length >= 3, { what: 'three refreshes on the screen' });
    const gaps = healthCalls.slice(-3).map((at, i, a) => (i ? at - a[i - 1] : 3000));
    assert.ok(
      gaps.every((g) => g >= 2900),
      `refreshes 3 s apart: ${gaps}`,
    );
    await page.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
      document.dispatchEvent(new Event('visibilitychange'));
    });
    const hidden = healthCalls.length;
    await quietFor(3500); // proves a negative: past one interval, nothing asked
    assert.ok(healthCalls.length <= hidden + 1, 'no refresh while hidden (one already on its way may land)');
    const whileHidden = healthCalls.length;
    await page.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { value: 'visible', configurable: true });
      document.dispatchEvent(new Event('visibilitychange'));
    });
    await waitFor(() => healthCalls.length > whileHidden, { what: 'a refresh once visible again' });

    // an update that fails: said in plain words on the status line, the last figures stay
    await page.route('**/v1/admin/health', (r) => r.fulfill({ status: 503, contentType: 'text/html', body: '<h1>503</h1>' }));
    await page.locator('#health-updated [role=alert]').getByText('Could not update: Portico is unavailable for a moment (HTTP 503).').waitFor();
    assert.equal(await body.locator('tr.deployment-row').count(), 1, 'the table stays');
    await check('health after a failed update');
    await page.unroute('**/v1/admin/health');
    await waitFor(async () => (await page.locator('#health-updated [role=alert]').count()) === 0, { what: 'the next update clears it' });
    // leaving the screen stops it
    await page.locator('#console-nav-requests').click();
    await page.getByRole('heading', { name: 'Requests' }).waitFor();
    const left = healthCalls.length;
    await quietFor(3500); // proves a negative: past one interval
    assert.equal(healthCalls.length, left, 'no refresh after leaving the screen');
  });

  test('requests: the call listed; filters narrow it; the CSV link has the same filters; opening it shows its timings and what was stored', async () => {
    // one failed call too (the upstream refuses it)
    up.script({ status: 400, errorMessage: 'the upstream refuses this' });
    const failed = await call('page-chat', 'refuse me');
    assert.equal(failed.status, 400);
    const failedId = failed.headers.get('x-request-id')!;
    const list = await adminGet('/requests?model=page-chat');
    const ok = list.list.find((r: any) => r.status === 200);
    assert.ok(ok, 'the served call is listed');
    await page.getByRole('button', { name: 'Show' }).click();
    const rows = page.locator('#requests-table tbody tr');
    await page.locator(`#requests-table tr[data-request-id="${ok.request_id}"]`).waitFor();
    await page.locator(`#requests-table tr[data-request-id="${failedId}"]`).waitFor();
    await check('requests list');
    await screenshot(page, 'requests', true, 'console');

    await page.getByLabel('Model', { exact: true }).fill('page-chat');
    await page.getByLabel('Status', { exact: true }).selectOption('error');
    await page.getByRole('button', { name: 'Show' }).click();
    await waitFor(async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-request-id')) === failedId, { what: 'only the failed call' });
    assert.match(await rows.first().innerText(), /Error 400/);
    const csv = new URL((await page.locator('#requests-csv').getAttribute('href'))!, t.url);
    assert.equal(csv.pathname, '/v1/admin/requests.csv');
    assert.equal(csv.searchParams.get('model'), 'page-chat');
    assert.equal(csv.searchParams.get('status'), 'error');
    const csvText = await page.evaluate(async (href) => (await fetch(href)).text(), csv.href);
    assert.ok(csvText.includes(failedId) && !csvText.includes(ok.request_id), 'the CSV has the same records');

    await page.getByLabel('Status', { exact: true }).selectOption('');
    await page.getByLabel('Request id', { exact: true }).fill(ok.request_id.slice(0, 12));
    await page.getByRole('button', { name: 'Show' }).click();
    await waitFor(async () => (await rows.count()) === 1 && (await rows.first().getAttribute('data-request-id')) === ok.request_id, { what: 'the call by its id' });

    // open it by keyboard: its timings, its input and output (a stored response)
    const open = page.getByRole('button', { name: `Open request ${ok.request_id}` });
    await open.focus();
    await page.keyboard.press('Enter');
    const dialog = page.locator('#request-dialog');
    await dialog.locator('#request-timings').waitFor();
    const timings = await dialog.locator('#request-timings').innerText();
    assert.match(timings, /Received: \d\d:\d\d:\d\d/);
    assert.match(timings, /First output: \+\d+ ms/);
    assert.match(timings, /End: \+\d+ ms/);
    assert.match(await dialog.locator('.request-input').innerText(), /Hello, stored model/);
    assert.match(await dialog.locator('.request-output').innerText(), /Served by the stored model\./);
    await check('one request');
    assert.equal(new URL(page.url()).pathname, `/console/requests/${ok.request_id}`, 'the open request has an address of its own');
    await page.keyboard.press('Escape');
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), `Open request ${ok.request_id}`, 'focus back on the row');
    assert.equal(new URL(page.url()).pathname, '/console/requests');
    // that address, opened afresh (a shared link), shows the request; closing it leaves the list
    await page.goto(`${t.url}/console/requests/${ok.request_id}`);
    await dialog.locator('#request-timings').waitFor();
    assert.match(await dialog.locator('.request-output').innerText(), /Served by the stored model\./);
    await page.keyboard.press('Escape');
    await waitFor(async () => new URL(page.url()).pathname === '/console/requests', { what: 'the list after the shared request closed' });
    await page.locator('#requests-table tbody tr').first().waitFor();
  });

  test('models: keys follow their deployment by id: the one left keeps its own key, a renamed id and a base_url moved elsewhere do not', async () => {
    // two deployments with keys of their own (made through the API); the page removes the first
    const A = 'sk-key-of-a-0123456789';
    const B = 'sk-key-of-b-0123456789';
    const made = await t.app.inject({
      method: 'POST',
      url: '/v1/admin/models',
      headers: operator,
      payload: {
        entry: {
          name: 'two-keys',
          deployments: [
            { id: 'tk-a', provider: 'openai-compatible', base_url: up.url, api_key: A },
            { id: 'tk-b', provider: 'openai-compatible', base_url: up.url, api_key: B },
          ],
        },
      },
    });
    assert.equal(made.statusCode, 201, made.body);
    // the screen shows it once opened again
    await page.locator('#console-nav-health').click();
    await page.locator('#console-nav-models').click();
    const row = modelRow('two-keys');
    const dialog = page.locator('#model-dialog');
    const hintOf = async (field: ReturnType<typeof dialog.locator>) => dialog.locator('#' + (await field.getAttribute('aria-describedby'))).innerText();
    await row.getByRole('button', { name: 'Edit two-keys' }).click();
    await dialog.getByRole('button', { name: 'Remove deployment 1' }).click();
    const left = dialog.locator('fieldset.deployment');
    assert.equal(await left.count(), 1);
    assert.match(await left.innerText(), /A key is stored/, 'tk-b, now first, keeps its own key');
    await check('a deployment that moved up');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await status('Model “two-keys” saved');
    let item = (await adminGet('/models')).list.find((m: any) => m.name === 'two-keys');
    assert.deepEqual(
      item.entry.deployments.map((d: any) => d.id),
      ['tk-b'],
    );
    assert.deepEqual(item.secrets, { 'deployments.tk-b.api_key': true }, "tk-b kept its own key, not tk-a's");
    up.script({ text: 'b here' });
    await row.getByRole('button', { name: 'Test deployment tk-b' }).click();
    await row.locator('.test-result').getByText('b here').waitFor();
    assert.equal(up.requests.at(-1)!.headers.authorization, `Bearer ${B}`, "tk-b's own key, never tk-a's");

    // the id renamed: a new deployment for the server, no key; the form says so before saving
    await row.getByRole('button', { name: 'Edit two-keys' }).click();
    const idField = dialog.getByLabel('Deployment id', { exact: true });
    await idField.fill('tk-c');
    const keyField = dialog.getByLabel('Upstream API key', { exact: true });
    assert.match(await hintOf(keyField), /stays with the deployment id it was typed for/);
    await idField.fill('tk-b');
    assert.match(await hintOf(keyField), /A key is stored/, 'the id given back: kept again');
    // the base_url to another origin: the key is not sent there; the form says so, and saves without it
    await dialog.getByLabel('Base URL', { exact: true }).fill('http://elsewhere.invalid/v1');
    assert.match(await hintOf(keyField), /goes to another upstream/);
    await check('a base URL moved to another upstream');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await status('Model “two-keys” saved');
    item = (await adminGet('/models')).list.find((m: any) => m.name === 'two-keys');
    assert.deepEqual(item.secrets, {}, 'the key did not follow to another origin');
    assert.equal(item.entry.deployments[0].base_url, 'http://elsewhere.invalid/v1');
    assert.equal((await t.app.inject({ method: 'DELETE', url: '/v1/admin/models/two-keys', headers: operator })).statusCode, 200);
  });

  test('in Chinese: the three screens', async () => {
    await page.locator('#language').selectOption('zh');
    await page.locator('#console-nav-models').click();
    await page.getByRole('heading', { name: '模型' }).waitFor();
    await modelRow('file-chat').getByText('来自文件').waitFor();
    await check('models in Chinese');
    await screenshot(page, 'models-zh', true, 'console');
    // a refusal in the person's language: a name that is taken
    await page.getByRole('button', { name: '添加模型' }).click();
    const dialog = page.locator('#model-dialog');
    await dialog.getByLabel('名称', { exact: true }).fill('file-chat');
    await dialog.getByLabel('基础 URL', { exact: true }).fill(up.url);
    await dialog.getByRole('button', { name: '添加模型' }).click();
    const refusal = dialog.getByRole('alert');
    await refusal.waitFor();
    assert.match(await refusal.innerText(), /[\u3400-\u9fff]/, 'in Chinese');
    await check('a refusal in Chinese');
    await page.keyboard.press('Escape');
    await page.locator('#console-nav-health').click();
    await page.getByRole('heading', { name: '健康状态' }).waitFor();
    await page.locator('#health-table').waitFor();
    assert.match(await page.locator('#health-updated').innerText(), /最后更新/);
    await check('health in Chinese');
    await screenshot(page, 'health-zh', true, 'console');
    await page.locator('#console-nav-requests').click();
    await page.getByRole('heading', { name: '请求' }).waitFor();
    await page.locator('#requests-table').waitFor();
    await check('requests in Chinese');
    await screenshot(page, 'requests-zh', true, 'console');
    await page.locator('#language').selectOption('en');
    await page.getByRole('heading', { name: 'Requests' }).waitFor();
  });

  test('models: remove the key, disable (404 to clients), enable, remove; the API and the database agree', async () => {
    await page.locator('#console-nav-models').click();
    const row = modelRow('page-chat');
    await row.waitFor();
    // remove the stored key
    await row.getByRole('button', { name: 'Edit page-chat' }).click();
    const dialog = page.locator('#model-dialog');
    await dialog.getByLabel('Remove the stored key', { exact: true }).check();
    assert.equal(await dialog.getByLabel('Upstream API key', { exact: true }).isDisabled(), true);
    await dialog.getByRole('button', { name: 'Save' }).click();
    await status('Model “page-chat” saved');
    let item = (await adminGet('/models')).list.find((m: any) => m.name === 'page-chat');
    assert.deepEqual(item.secrets, {}, 'no key any more');
    assert.equal((await dbRow('page-chat'))!.secrets, '{}');
    up.script({ text: 'no key now' });
    await row.getByRole('button', { name: 'Test deployment pc-main' }).click();
    await row.locator('.test-result').getByText('no key now').waitFor();
    assert.equal(up.requests.at(-1)!.headers.authorization, undefined, 'the upstream gets no key');

    // disable: confirmation first; then clients get 404
    await row.getByRole('button', { name: 'Disable page-chat' }).click();
    const confirm = page.locator('#model-confirm');
    await confirm.getByRole('heading', { name: 'Disable “page-chat”?' }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Cancel', 'the confirmation starts on Cancel');
    await check('confirm disable');
    await page.locator('#model-confirm-yes').click();
    await status('Model “page-chat” disabled');
    assert.match(await row.innerText(), /disabled/);
    assert.equal((await call('page-chat', 'anyone?')).status, 404);
    item = (await adminGet('/models')).list.find((m: any) => m.name === 'page-chat');
    assert.equal(item.enabled, false);
    assert.equal((await dbRow('page-chat'))!.enabled, false);
    await row.getByRole('button', { name: 'Enable page-chat' }).click();
    await page.locator('#model-confirm-yes').click();
    await status('Model “page-chat” enabled');
    up.script({ text: 'back' });
    assert.equal((await call('page-chat', 'back?')).status, 200);

    // remove
    await row.getByRole('button', { name: 'Remove page-chat' }).click();
    await page.locator('#model-confirm').getByText('This cannot be undone').waitFor();
    await page.locator('#model-confirm-yes').click();
    await status('Model “page-chat” removed');
    assert.equal(await row.count(), 0);
    await waitFor(async () => (await page.evaluate(() => document.activeElement?.id)) === 'add-model', { what: 'the focus on "Add a model" after the row went' });
    assert.equal((await call('page-chat', 'gone?')).status, 404);
    assert.equal(
      (await adminGet('/models')).list.some((m: any) => m.name === 'page-chat'),
      false,
    );
    assert.equal(await dbRow('page-chat'), undefined, 'the database has no row left');
    assert.ok(!answers.some((a) => a.includes(SECRET)), 'no admin answer the page received carried the key');
    assert.deepEqual(problems, []);
    assert.deepEqual(a11y, []);
  });
});
