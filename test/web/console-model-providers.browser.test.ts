/**
 * The console's model form for the native providers, in a real Chromium against the real admin API: an anthropic
 * model (its own fields, a stored key, the cache-write prices) and an azure-openai one with `auth: entra` are added
 * through the form, their stored entries checked through the admin API and each tested against its mock upstream
 * (the key, and an Entra token, reach it); a bedrock model with keys the form has no field for is opened and saved
 * unchanged, then changed in one field, without losing any of them. Each provider's form is screenshotted in a
 * wide and a narrow window; axe-core on each new state.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { startAnthropicMock, type AnthropicMock } from '../helpers/anthropic-mock.js';
import { startAzureMock, type AzureMock } from '../helpers/azure-mock.js';
import { startEntraMock, type EntraMock } from '../helpers/entra-mock.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { bearer } from '../admin/helpers.js';

/** the anthropic model's key: typed once into the form, never shown again */
const KEY = 'sk-ant-form-VERY-secret-0123456789';
const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const CLIENT = '5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9';
const CLIENT_SECRET = 'Qw3~form.entra-secret_9876543210';
process.env.CONSOLE_FORM_ENTRA_SECRET = CLIENT_SECRET;

describe("the console's model form for anthropic, azure-openai, gemini and bedrock", () => {
  let t: TestApp & { url?: string };
  let anth: AnthropicMock;
  let idp: EntraMock;
  let az: AzureMock;
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  let operator: Record<string, string>;
  /** every admin answer the page received: the key must be in none of them */
  const answers: string[] = [];
  const a11y: string[] = [];
  const check = async (state: string) => a11y.push(...(await axeViolations(page, state)));
  const dialog = () => page.locator('#model-dialog');
  const field = (label: string) => dialog().getByLabel(label, { exact: true });
  const modelRow = (name: string) => page.locator(`#models-table tr[data-model="${name}"]`);
  const status = (text: string | RegExp) => page.getByRole('status').filter({ hasText: text }).waitFor();
  const item = async (name: string) => {
    const res = await t.app.inject({ method: 'GET', url: '/v1/admin/models', headers: operator });
    assert.equal(res.statusCode, 200, res.body);
    assert.ok(!res.body.includes(KEY), 'the key is not in GET /models');
    return res.json().data.list.find((m: { name: string }) => m.name === name);
  };
  /** the dialog in a wide and in a narrow window; the narrow one must not scroll sideways */
  const shots = async (name: string) => {
    // windows tall enough for the whole dialog (it scrolls inside a shorter one)
    await page.setViewportSize({ width: 1280, height: 2000 });
    await screenshot(page, `model-form-${name}`, false, 'console');
    await page.setViewportSize({ width: 390, height: 3400 });
    const overflow = await dialog().evaluate((d) => d.scrollWidth - d.clientWidth);
    assert.ok(overflow <= 0, `the ${name} form fits a narrow window (${overflow}px too wide)`);
    await screenshot(page, `model-form-${name}-narrow`, false, 'console');
    await page.setViewportSize({ width: 1280, height: 900 });
  };
  const visibleLabels = (scope: Locator) => scope.locator('label').evaluateAll((ls) => ls.filter((l) => (l as HTMLElement).checkVisibility()).map((l) => l.textContent!.trim()));

  before(async () => {
    anth = await startAnthropicMock({ apiKey: KEY });
    idp = await startEntraMock({ tenant: TENANT, clientId: CLIENT, clientSecret: CLIENT_SECRET });
    az = await startAzureMock({ adToken: (tok) => idp.issued.includes(tok) });
    t = await buildTestApp({ listen: true, builtins: false });
    await t.core.operators.add('olga', 'cli', 'test');
    operator = bearer(await t.token('olga'));
    browser = await launchChromium();
    ({ ctx, page, problems } = await openPage(browser));
    ctx.setDefaultTimeout(15_000);
    page.on('response', (r) => {
      if (new URL(r.url()).pathname.startsWith('/v1/admin/'))
        void r.text().then(
          (b) => answers.push(b),
          () => {},
        );
    });
    await page.goto(await signInLink(t, 'olga'));
    await page.locator('#nav-console').waitFor();
    await page.goto(`${t.url}/console/models`);
    await page.locator('#add-model').waitFor();
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    await anth?.close();
    await az?.close();
    await idp?.close();
  });

  test('anthropic: its own fields and the cache-write prices; the stored entry is what the form said, the key reaches Anthropic and is never shown', async () => {
    await page.locator('#add-model').click();
    await dialog().getByRole('heading', { name: 'Add a model' }).waitFor();
    // openai-compatible first: no cache-write prices (no provider of the model counts cache writes)
    assert.equal(await field('Cache writes, per million tokens').count(), 0);
    await field('Name').fill('claude-page');
    await field('Provider').selectOption('anthropic');
    const deployment = dialog().locator('fieldset.deployment');
    assert.deepEqual(await visibleLabels(deployment), [
      'Deployment id',
      'Provider',
      'Upstream model',
      'Base URL',
      'Default output cap (max_tokens)',
      'Key variable',
      'Beta features (anthropic-beta)',
      'Cache the prompt',
      'Upstream API key',
      'Requests a minute (rpm)',
      'Tokens a minute (tpm)',
    ]);
    await field('Upstream model').fill('claude-sonnet-4-5');
    await field('Base URL').fill(anth.url);
    await field('Default output cap (max_tokens)').fill('8192');
    await field('Beta features (anthropic-beta)').fill('interleaved-thinking-2025-05-14, context-1m-2025-08-07');
    await field('Cache the prompt').check();
    await field('Upstream API key').fill(KEY);
    await field('Input, per million tokens').fill('3');
    await field('Output, per million tokens').fill('15');
    await field('Cached input, per million tokens').fill('0.3');
    await field('Cache writes, per million tokens').fill('3.75');
    await field('One-hour cache writes, per million tokens').fill('6');
    // a key variable and a stored key are one or the other: the key field says where the key comes from
    await field('Key variable').fill('ANTHROPIC_KEY_OF_THIS_TEST');
    assert.equal(await field('Upstream API key').isDisabled(), true);
    assert.match(
      await dialog()
        .locator(`#${await field('Upstream API key').getAttribute('aria-describedby')}`)
        .innerText(),
      /read from ANTHROPIC_KEY_OF_THIS_TEST/,
    );
    await field('Key variable').fill('');
    assert.equal(await field('Upstream API key').isDisabled(), false);
    await check('the anthropic form');
    await shots('anthropic');
    await dialog().getByRole('button', { name: 'Add model' }).click();
    await status('Model “claude-page” added');

    const m = await item('claude-page');
    assert.deepEqual(m.entry, {
      name: 'claude-page',
      type: 'text',
      provider: 'anthropic',
      upstream_model: 'claude-sonnet-4-5',
      base_url: anth.url,
      max_tokens: 8192,
      anthropic_beta: ['interleaved-thinking-2025-05-14', 'context-1m-2025-08-07'],
      cache_prompt: true,
      pricing: { input_per_million: 3, output_per_million: 15, cached_input_per_million: 0.3, cache_write_input_per_million: 3.75, cache_write_1h_input_per_million: 6 },
    });
    assert.deepEqual(m.secrets, { api_key: true });
    const row = await t.core.db.db.selectFrom('stored_models').selectAll().where('name', '=', 'claude-page').executeTakeFirstOrThrow();
    assert.ok(!JSON.stringify(row).includes(KEY), 'the key is sealed in the database');
    // the key reaches Anthropic, in x-api-key, with the betas the form listed
    await modelRow('claude-page').getByRole('button', { name: 'Test deployment claude-page' }).click();
    await modelRow('claude-page').locator('.test-result').getByText('Hello from Claude.').waitFor();
    const sent = anth.requests.at(-1)!;
    assert.equal(sent.headers['x-api-key'], KEY);
    assert.equal(sent.headers['anthropic-beta'], 'interleaved-thinking-2025-05-14,context-1m-2025-08-07');
    assert.equal(sent.body.model, 'claude-sonnet-4-5');

    // opened again: every field holds its value, the key field says a key is stored and shows none
    await modelRow('claude-page').getByRole('button', { name: 'Edit claude-page' }).click();
    assert.equal(await field('Default output cap (max_tokens)').inputValue(), '8192');
    assert.equal(await field('Beta features (anthropic-beta)').inputValue(), 'interleaved-thinking-2025-05-14, context-1m-2025-08-07');
    assert.equal(await field('Cache the prompt').isChecked(), true);
    assert.equal(await field('One-hour cache writes, per million tokens').inputValue(), '6');
    assert.equal(await field('Upstream API key').inputValue(), '');
    assert.match(await deployment.innerText(), /A key is stored/);
    assert.equal(await dialog().locator('#model-other').inputValue(), '', 'nothing left for the JSON field');
    await dialog().getByRole('button', { name: 'Save' }).click();
    await status('Model “claude-page” saved');
    assert.deepEqual((await item('claude-page')).secrets, { api_key: true }, 'saved unchanged: the key kept');
    assert.ok(!answers.some((a) => a.includes(KEY)), 'the key is in no admin answer the page received');
    assert.ok(!(await page.content()).includes(KEY));
  });

  test('azure-openai with auth: entra: no key field, the Entra keys instead; a server refusal shown in the form; the token reaches Azure', async () => {
    await page.locator('#add-model').click();
    await field('Name').fill('azure-page');
    await field('Provider').selectOption('azure-openai');
    await field('Resource endpoint').fill(az.url);
    await field('Azure deployment').fill('gpt4o-prod');
    await field('API surface').selectOption('v1');
    assert.equal(await field('Upstream API key').count(), 1, 'auth: api key (the default) has a key field');
    await field('Authentication').selectOption('entra');
    assert.equal(await field('Upstream API key').count(), 0, 'auth: entra stores no key');
    assert.equal(await field('Key variable').count(), 0);
    await field('Tenant (directory) id').fill(TENANT);
    // not a GUID: the server's check refuses it, and the form says so, naming the key
    await field('Client (application) id').fill('not-a-guid');
    await field('Client secret variable').fill('CONSOLE_FORM_ENTRA_SECRET');
    await dialog().locator('summary', { hasText: 'More keys of this deployment' }).click();
    await dialog()
      .locator('fieldset.deployment textarea')
      .fill(JSON.stringify({ authority_host: idp.url }));
    // the cache-write prices are for anthropic and bedrock only
    assert.equal(await field('Cache writes, per million tokens').count(), 0);
    await dialog().getByRole('button', { name: 'Add model' }).click();
    const refusal = dialog().getByRole('alert');
    await refusal.waitFor();
    assert.match(await refusal.innerText(), /'client_id' must be the app's application \(client\) id, a GUID/);
    await check('the azure-openai form with a refusal');
    await field('Client (application) id').fill(CLIENT);
    await shots('azure-openai');
    await dialog().getByRole('button', { name: 'Add model' }).click();
    await status('Model “azure-page” added');
    const m = await item('azure-page');
    assert.deepEqual(m.entry, {
      name: 'azure-page',
      type: 'text',
      provider: 'azure-openai',
      endpoint: az.url,
      deployment: 'gpt4o-prod',
      surface: 'v1',
      auth: 'entra',
      tenant_id: TENANT,
      client_id: CLIENT,
      client_secret_env: 'CONSOLE_FORM_ENTRA_SECRET',
      authority_host: idp.url,
    });
    assert.deepEqual(m.secrets, {});
    await modelRow('azure-page').getByRole('button', { name: 'Test deployment azure-page' }).click();
    await modelRow('azure-page').locator('.test-result').getByText('Hello from Azure.').waitFor();
    assert.equal(idp.requests.length, 1);
    assert.equal(az.requests.at(-1)!.path, '/openai/v1/chat/completions');
    assert.equal(az.requests.at(-1)!.headers.authorization, `Bearer ${idp.issued[0]}`);
    assert.ok(!answers.some((a) => a.includes(CLIENT_SECRET)));
  });

  test('bedrock: opened and saved unchanged, then one field changed: the keys the form has no field for are kept', async () => {
    const entry = {
      name: 'bedrock-page',
      type: 'text',
      retry_backoff_ms: 250,
      breaker: { failures: 3, cooldown_ms: 10000 },
      pricing: { input_per_million: 0.8, output_per_million: 4, cache_write_1h_input_per_million: 1.6 },
      deployments: [
        {
          id: 'br-eu',
          provider: 'bedrock',
          region: 'eu-central-1',
          upstream_model: 'anthropic.claude-3-5-haiku-20241022-v1:0',
          max_tokens: 2048,
          context_window: 200000,
          timeout_ms: 60000,
          timeouts: { first_byte_ms: 30000 },
          weight: 2,
          rpm: 100,
        },
        { id: 'br-direct', provider: 'anthropic', base_url: anth.url, cache_prompt: false, anthropic_version: '2023-06-01', api_key: KEY },
      ],
    };
    const made = await t.app.inject({ method: 'POST', url: '/v1/admin/models', headers: operator, payload: { entry } });
    assert.equal(made.statusCode, 201, made.body);
    const { api_key: _key, ...direct } = entry.deployments[1]!;
    const stored = { ...entry, deployments: [entry.deployments[0], direct] };
    assert.deepEqual((await item('bedrock-page')).entry, stored);
    await page.locator('#console-nav-health').click();
    await page.locator('#console-nav-models').click();
    await modelRow('bedrock-page').getByRole('button', { name: 'Edit bedrock-page' }).click();
    const first = dialog().locator('fieldset.deployment').nth(0);
    assert.equal(await first.getByLabel('AWS region', { exact: true }).inputValue(), 'eu-central-1');
    assert.equal(await first.getByLabel('Upstream model', { exact: true }).inputValue(), 'anthropic.claude-3-5-haiku-20241022-v1:0');
    assert.equal(await first.getByLabel('Upstream API key', { exact: true }).count(), 0, 'bedrock stores no key');
    assert.match(await first.innerText(), /AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY/);
    // what the form has no field for is in the JSON fields
    assert.deepEqual(JSON.parse(await first.locator('textarea').inputValue()), { context_window: 200000, timeout_ms: 60000, timeouts: { first_byte_ms: 30000 } });
    const second = dialog().locator('fieldset.deployment').nth(1);
    assert.deepEqual(JSON.parse(await second.locator('textarea').inputValue()), { cache_prompt: false, anthropic_version: '2023-06-01' });
    assert.equal(await second.getByLabel('Cache the prompt', { exact: true }).isChecked(), false);
    assert.deepEqual(JSON.parse(await dialog().locator('#model-other').inputValue()), { retry_backoff_ms: 250, breaker: { failures: 3, cooldown_ms: 10000 } });
    assert.equal(await field('One-hour cache writes, per million tokens').inputValue(), '1.6');
    await check('a bedrock model opened');
    await shots('bedrock');
    await dialog().getByRole('button', { name: 'Save' }).click();
    await status('Model “bedrock-page” saved');
    let m = await item('bedrock-page');
    assert.deepEqual(m.entry, stored, 'saved unchanged: the entry it was');
    assert.deepEqual(m.secrets, { 'deployments.br-direct.api_key': true });

    // the anthropic deployment's stored key: not sent to another origin, nor kept by a provider that stores none
    await modelRow('bedrock-page').getByRole('button', { name: 'Edit bedrock-page' }).click();
    const keyHint = async () => second.locator(`#${await second.getByLabel('Upstream API key', { exact: true }).getAttribute('aria-describedby')}`).innerText();
    assert.match(await keyHint(), /A key is stored/);
    await second.getByLabel('Base URL', { exact: true }).fill('https://elsewhere.example');
    assert.match(await keyHint(), /goes to another upstream/);
    await second.getByLabel('Base URL', { exact: true }).fill(anth.url);
    assert.match(await keyHint(), /A key is stored/);
    await second.getByLabel('Provider', { exact: true }).selectOption('bedrock');
    await second.getByText('This provider takes no stored key').waitFor();
    await dialog().getByRole('button', { name: 'Cancel' }).click();

    await modelRow('bedrock-page').getByRole('button', { name: 'Edit bedrock-page' }).click();
    await first.getByLabel('Default output cap (max_tokens)', { exact: true }).fill('4096');
    await dialog().getByRole('button', { name: 'Save' }).click();
    await status('Model “bedrock-page” saved');
    m = await item('bedrock-page');
    assert.deepEqual(m.entry, { ...stored, deployments: [{ ...entry.deployments[0], max_tokens: 4096 }, direct] });
    assert.deepEqual(m.secrets, { 'deployments.br-direct.api_key': true });
  });

  test('gemini: its fields; in Chinese, every new label and hint is translated', async () => {
    await page.locator('#add-model').click();
    await field('Provider').selectOption('gemini');
    assert.deepEqual(await visibleLabels(dialog().locator('fieldset.deployment')), [
      'Deployment id',
      'Provider',
      'Upstream model',
      'Base URL',
      'Key variable',
      'Upstream API key',
      'Requests a minute (rpm)',
      'Tokens a minute (tpm)',
    ]);
    assert.equal(await field('Base URL').getAttribute('required'), null, 'a default base URL: not required');
    await shots('gemini');
    await page.keyboard.press('Escape');
    await page.locator('#language').selectOption('zh');
    await page.getByRole('heading', { name: '模型' }).waitFor();
    await page.getByRole('button', { name: '添加模型' }).click();
    for (const provider of ['anthropic', 'azure-openai', 'bedrock', 'gemini']) {
      await dialog().getByLabel('提供方', { exact: true }).selectOption(provider);
      if (provider === 'azure-openai') await dialog().getByLabel('身份验证', { exact: true }).selectOption('entra');
      // (URLs aside: https://bedrock-runtime.<region>.amazonaws.com)
      const text = (await dialog().locator('fieldset.deployment').innerText()).replace(/https?:\/\/\S+/g, '');
      // the labels and hints are Chinese: none of the English sentences is left
      assert.doesNotMatch(text, /\b(the|and|empty|optional|when|with|from|name|stored|region|endpoint)\b/i, `${provider} in Chinese: ${text}`);
      if (provider === 'azure-openai') await check('the azure-openai form in Chinese');
    }
    await page.setViewportSize({ width: 1280, height: 2000 });
    await screenshot(page, 'model-form-zh', false, 'console');
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.keyboard.press('Escape');
    await page.locator('#language').selectOption('en');
    await page.getByRole('heading', { name: 'Models' }).waitFor();
  });

  test('no accessibility violation, no page error', () => {
    assert.deepEqual(a11y, []);
    assert.deepEqual(problems, []);
  });
});
