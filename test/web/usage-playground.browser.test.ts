/**
 * The usage screen per key and per model (bar charts of daily totals, legends with values, days without clock
 * times), the playground's conversation, code, voices and key, a long streamed answer, and errors in plain words,
 * in a real Chromium, in English and Chinese, each new state checked by axe-core. One browser for the file.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { NO_VOICE_WARM_UP, buildTestApp, type TestApp } from '../helpers/app.js';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scripted-upstream.js';
import type { ModelSpec } from '../../src/models/config.js';
import { launchChromium, openPage, screenshot, signInLink } from '../helpers/browser.js';
import { axeViolations } from '../helpers/axe.js';
import { execFile, spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';

const DAY = 86_400;

describe('usage per key and the playground in Chromium', () => {
  let t: TestApp & { url?: string };
  let up: ScriptedUpstream;
  let browser: Browser;
  let ctx: BrowserContext;
  let page: Page;
  let problems: string[];
  const a11y: string[] = [];
  const check = async (state: string) => a11y.push(...(await axeViolations(page, state)));

  before(async () => {
    up = await startScriptedUpstream();
    const models = [{ name: 'chat-small', provider: 'openai-compatible', type: 'text', base_url: up.url, upstream_model: 'tiny' } as ModelSpec];
    // the speech test speaks one espeak-ng voice (marin): no warm-up of the six
    t = await buildTestApp({ listen: true, models, builtins: true, runtime: NO_VOICE_WARM_UP });
    browser = await launchChromium();
    ({ ctx, page, problems } = await openPage(browser));
  });
  after(async () => {
    await browser?.close();
    await t?.close();
    await up?.close();
  });

  test('the first load stays under 150 kB gzip', async () => {
    const html = await fetch(`${t.url}/signin`, { headers: { 'accept-encoding': 'gzip' } });
    let total = Number((await html.arrayBuffer()).byteLength);
    const text = await (await fetch(`${t.url}/signin`)).text();
    const assets = [...text.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]);
    assert.ok(assets.length >= 2, 'the script and the stylesheet');
    for (const a of assets) {
      const res = await fetch(`${t.url}${a}`, { headers: { 'accept-encoding': 'gzip' } });
      assert.equal(res.status, 200);
      // fetch decodes the body: the bytes on the wire are the .gz companion's
      total += Number(res.headers.get('content-length') ?? (await res.arrayBuffer()).byteLength);
    }
    assert.ok(total < 150 * 1024, `first load ${total} B gzip`);
  });

  test('usage per key and per model: bar charts of daily totals with the spend, only what has data, legends with values, days without a time', async () => {
    const alice = { userId: 'alice', orgRoles: {} };
    const laptop = await t.services.inferenceKeys.create(alice, { name: 'laptop' });
    const ci = await t.services.inferenceKeys.create(alice, { name: 'ci runner' });
    const now = Math.floor(Date.now() / 1000);
    const rec = async (
      id: string,
      keyId: string,
      model: string,
      daysBack: number,
      u: { input?: number; output?: number; characters?: number; audioOut?: number; costMicros: number },
    ) => {
      await t.services.usage.record({
        requestId: id,
        key: { keyId, userId: 'alice', orgId: 'default' },
        model,
        operation: model === 'tts-1' ? 'speech' : 'responses',
        inputTokens: u.input,
        outputTokens: u.output,
        characters: u.characters,
        outputAudioSeconds: u.audioOut,
        costMicros: u.costMicros,
      });
      await t.services.usage.flush();
      await t.services.db.db
        .updateTable('usage_records')
        .set({ created_at: now - daysBack * DAY })
        .where('request_id', '=', id)
        .execute();
    };
    // a spoken answer: audio seconds produced
    await rec('u1', laptop.id, 'chat-small', 0, { input: 100, output: 50, audioOut: 12.5, costMicros: 1_500_000 });
    await rec('u2', laptop.id, 'chat-small', 2, { input: 10, output: 5, costMicros: 250_000 });
    await rec('u3', ci.id, 'chat-small', 2, { input: 20, output: 10, costMicros: 500_000 });
    await rec('u4', ci.id, 'tts-1', 0, { characters: 1200, costMicros: 18_000 });
    await t.services.inferenceKeys.delete(alice, ci.id);

    await page.goto(await signInLink(t, 'alice'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage and balance' }).waitFor();
    await page.locator('#chart-requests .plot svg').waitFor();

    // one chart per figure that has data, spend first; audio seconds taken in (none here) has none
    assert.deepEqual(await page.locator('.chart figcaption').allInnerTexts(), ['Spend (credits)', 'Requests', 'Tokens', 'Characters (speech)', 'Audio seconds out']);
    // bars: one per day and model that has requests (today: chat-small and tts-1; two days ago: chat-small)
    assert.equal(await page.locator('#chart-requests rect.bar').count(), 3);
    // counts have whole steps on their axis
    assert.deepEqual(await page.locator('#chart-requests .grid text').allTextContents(), ['0', '1', '2']);
    // the legends give each series its total; a chart lists only the models with something in it
    const legend = async (id: string) => (await page.locator(`#${id} .legend li`).allInnerTexts()).map((s) => s.replace(/\s+/g, ' ').trim());
    assert.deepEqual(await legend('chart-requests'), ['chat-small 3', 'tts-1 1']);
    assert.deepEqual(await legend('chart-tokens'), ['chat-small 195']);
    assert.deepEqual(await legend('chart-characters'), ['tts-1 1,200']);
    assert.deepEqual(await legend('chart-output_audio_seconds'), ['chat-small 12.5']);
    assert.deepEqual(await legend('chart-cost'), ['chat-small 2.25', 'tts-1 0.018']);
    // the days on the axis are dates, never a clock time
    const days = await page.locator('#chart-requests text.day').allTextContents();
    assert.ok(days.length >= 2);
    for (const d of days) assert.match(d, /^\d{1,2} [A-Z][a-z]{2,3}$/, d);
    const today = new Date(now * 1000).toISOString().slice(0, 10);
    const tip = await page.locator('#chart-requests rect.bar title').allTextContents();
    assert.ok(
      tip.includes(`${new Intl.DateTimeFormat('en-GB', { month: 'short', day: 'numeric', timeZone: 'UTC' }).format(new Date(`${today}T00:00:00Z`))} · chat-small: 1`),
      tip.join(' | '),
    );
    // the tables by model and by key, the deleted key named as such
    const rows = async (id: string) => (await page.locator(`#${id} tbody tr`).allInnerTexts()).map((s) => s.replace(/\s+/g, ' ').trim());
    // columns: requests, tokens, characters, audio seconds in, audio seconds out, cost
    assert.deepEqual(await rows('usage-by-model'), ['chat-small 3 195 0 0 12.5 2.25', 'tts-1 1 0 1,200 0 0 0.018']);
    assert.deepEqual(await rows('usage-by-key'), ['ci runner (deleted) 2 30 1,200 0 0 0.518', 'laptop 2 165 0 0 12.5 1.75']);
    await check('usage by model');

    // the charts split by key
    await page.getByRole('radio', { name: 'Key' }).check();
    assert.deepEqual(await legend('chart-requests'), ['ci runner (deleted) 2', 'laptop 2']);
    assert.deepEqual(await legend('chart-cost'), ['ci runner (deleted) 0.518', 'laptop 1.75']);
    assert.match(String(await page.locator('#chart-cost .plot svg').getAttribute('aria-label')), /^Spend \(credits\): ci runner \(deleted\) 0\.518, laptop 1\.75$/);
    await check('usage by key');
    await screenshot(page, 'usage-keys', true);

    // in Chinese: the words, the days as Chinese dates
    await page.getByLabel('Language').selectOption('zh');
    await page.getByRole('heading', { name: '用量与余额' }).waitFor();
    assert.equal(await page.locator('#usage-by-key caption').innerText(), '按密钥');
    assert.deepEqual(await legend('chart-requests'), ['ci runner (已删除) 2', 'laptop 2']);
    for (const d of await page.locator('#chart-requests text.day').allTextContents()) assert.match(d, /^\d{1,2}月\d{1,2}日$/, d);
    await check('usage in Chinese');
    await page.getByLabel('语言').selectOption('en');
    await page.getByRole('heading', { name: 'Usage and balance' }).waitFor();
    // and on a phone, nothing is wider than the screen
    await page.setViewportSize({ width: 390, height: 844 });
    assert.ok((await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)) <= 0, 'no sideways scrolling');
    await page.setViewportSize({ width: 1280, height: 900 });
    assert.deepEqual(a11y, []);
  });

  test('the playground makes one short-lived key for the session, scoped to what it calls, and uses it again', async () => {
    const mine = async () => (await t.services.inferenceKeys.list({ userId: 'alice', orgRoles: {} }, { page: 1, per_page: 100 })).list.filter((k) => k.name === 'Playground');
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
    const session = await (await page.request.get(`${t.url}/v1/portal/session`)).json();
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    await page.locator('#play-key option:checked', { hasText: /^Playground \(sk-/ }).waitFor({ state: 'attached' });
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    const keys = await mine();
    assert.equal(keys.length, 1, 'one key however often the button is pressed');
    assert.deepEqual(keys[0].scopes, ['responses', 'audio', 'realtime']);
    assert.equal(keys[0].expires_at, session.data.expires_at, 'it expires with the session');
    assert.equal(await page.locator('#play-key option', { hasText: /^Playground/ }).count(), 1);
    await check('playground with its key');
  });

  test('a conversation: system prompt, temperature, max tokens, Ctrl+Enter, history sent each turn, stop, a new conversation', async () => {
    await page.getByLabel('System prompt').fill('Answer in one line.');
    await page.getByLabel('Temperature').fill('0.3');
    await page.getByLabel('Max output tokens').fill('64');
    up.script({ text: ['Hi', ' there', '.'] });
    await page.getByLabel('Message').fill('Hello?');
    await page.getByLabel('Message').press('Control+Enter');
    await page.locator('#text-answer').getByText('Hi there.').waitFor();
    await page
      .getByRole('status')
      .filter({ hasText: /Done \(\d+ output tokens\)/ })
      .waitFor();
    let req = up.requests.at(-1)!;
    assert.equal(req.body.temperature, 0.3);
    assert.equal(req.body.max_tokens ?? req.body.max_completion_tokens, 64);
    assert.deepEqual(
      req.body.messages.map((m: any) => [m.role, typeof m.content === 'string' ? m.content : m.content.map((c: any) => c.text).join('')]),
      [
        ['system', 'Answer in one line.'],
        ['user', 'Hello?'],
      ],
    );
    assert.equal(await page.getByLabel('Message').inputValue(), '', 'the box is emptied for the next message');
    // the second turn carries the first
    up.script({ text: ['Fine', ', thanks.'] });
    await page.getByLabel('Message').fill('How are you?');
    await page.getByLabel('Message').press('Control+Enter');
    await page.locator('#text-answer').getByText('Fine, thanks.').waitFor();
    req = up.requests.at(-1)!;
    assert.deepEqual(
      req.body.messages.map((m: any) => m.role),
      ['system', 'user', 'assistant', 'user'],
    );
    assert.deepEqual(await page.locator('.conversation .msg .text').allInnerTexts(), ['Hello?', 'Hi there.', 'How are you?', 'Fine, thanks.']);
    await check('a conversation');
    await screenshot(page, 'playground', true);
    // stop: an answer that hangs half-way is stopped by the button; what came stays, marked as stopped
    up.script({ text: ['Once', ' upon', ' a', ' time'], hangAfter: 2 });
    await page.getByLabel('Message').fill('Tell me a story');
    await page.locator('#text-send').click();
    await page.locator('#text-answer').getByText('Once').waitFor();
    assert.equal(await page.locator('#text-stop').isEnabled(), true);
    await page.locator('#text-stop').click();
    await page.getByRole('status').filter({ hasText: 'Stopped.' }).waitFor();
    assert.match(await page.locator('.conversation .msg').last().innerText(), /Once[\s\S]*\(stopped\)/);
    assert.equal(await page.locator('#text-stop').isEnabled(), false);
    await page.getByRole('button', { name: 'New conversation' }).click();
    assert.equal(await page.locator('.conversation').count(), 0);
  });

  test('the code for the request: curl, Python and JavaScript with the official SDKs, the same request the page sends, and they run', async () => {
    await page.getByLabel('Message').fill("What's 2+2?");
    await page.getByText('Code for this request').click();
    const code = async (lang: string) => {
      await page.getByRole('radio', { name: lang }).check();
      return page.locator('#text-code-body').innerText();
    };
    const curl = await code('curl');
    const py = await code('Python');
    const js = await code('JavaScript');
    assert.match(py, /from openai import OpenAI/);
    assert.match(py, /client\.responses\.create\(/);
    assert.match(js, /import OpenAI from "openai"/);
    for (const c of [curl, py, js]) {
      assert.ok(c.includes(`${t.url}/v1`), 'pointed at this Portico');
      assert.ok(c.includes('PORTICO_API_KEY') && !/sk-[A-Za-z0-9]{20}/.test(c), 'the key is read from the environment, never written out');
    }
    // the curl body is the request Send makes
    const shown = JSON.parse(/-d '([\s\S]*)'$/.exec(curl)![1].replace(/'\\''/g, "'"));
    up.script({ text: '4.' });
    const sent = page.waitForRequest((r) => r.url().endsWith('/v1/responses') && r.method() === 'POST');
    await page.locator('#text-send').click();
    assert.deepEqual(JSON.parse((await sent).postData()!), shown);
    await page.locator('#text-answer').getByText('4.').waitFor();
    await check('the code view');
    await screenshot(page, 'playground-code', true);

    // each runs as shown, with a key of alice's (the JavaScript through the installed `openai` package)
    const key = await t.inferenceKey('alice');
    const env = { ...process.env, PORTICO_API_KEY: key };
    // asynchronously: the server under test runs in this process
    const run = promisify(execFile);
    up.script({ text: ['From', ' curl.'] });
    const curlOut = (await run('sh', ['-c', curl], { env, encoding: 'utf8' })).stdout;
    assert.match(curlOut, /"delta":"From"/);
    assert.match(curlOut, /response\.completed/);
    up.script({ text: ['From', ' JavaScript.'] });
    const file = 'dist/playground-code.mjs';
    writeFileSync(file, js);
    try {
      assert.equal((await run(process.execPath, [file], { env, encoding: 'utf8' })).stdout, 'From JavaScript.\n');
    } finally {
      rmSync(file, { force: true });
    }
    assert.deepEqual(up.requests.at(-1)!.body.messages.at(-1).role, 'user');
    // Python is not installed with its SDK here: its syntax is checked when a Python is there
    const parsed = spawnSync('python3', ['-c', 'import ast,sys; ast.parse(sys.stdin.read())'], { input: py });
    if (!parsed.error) assert.equal(parsed.status, 0, String(parsed.stderr));
  });

  test('a long answer stays smooth: 4,000 streamed events are appended one by one, the page stays correct', async (ctx_) => {
    const N = 4000;
    const pieces = Array.from({ length: N }, (_, i) => `w${i} `);
    up.script({ text: pieces });
    const cdp = await ctx.newCDPSession(page);
    await cdp.send('Performance.enable');
    const script = async () => ((await cdp.send('Performance.getMetrics')).metrics.find((m) => m.name === 'ScriptDuration')?.value ?? 0) * 1000;
    await page.getByRole('button', { name: 'New conversation' }).click();
    await page.getByLabel('Message').fill('Count to four thousand');
    const before = await script();
    const started = Date.now();
    await page.locator('#text-send').click();
    await page
      .getByRole('status')
      .filter({ hasText: /Done \(\d+ output tokens\)/ })
      .waitFor({ timeout: 60_000 });
    const jsMs = (await script()) - before;
    const wallMs = Date.now() - started;
    // every piece, in order, once
    assert.equal(await page.locator('#text-answer').textContent(), pieces.join(''));
    // the events: one delta per piece besides the lifecycle events, counted in the summary and all in the box once opened
    const summary = await page.getByText(/^Raw events \(\d+\)$/).innerText();
    const count = Number(/\((\d+)\)/.exec(summary)![1]);
    assert.ok(count >= N + 3, summary);
    await page.getByText(/^Raw events \(\d+\)$/).click();
    // the box is filled when it opens (its toggle event)
    await page.waitForFunction((n) => document.querySelector('#text-events')!.textContent!.trimEnd().split('\n').length === n, count);
    const lines = (await page.locator('#text-events').textContent())!.trimEnd().split('\n');
    assert.equal(lines.length, count);
    assert.equal(lines.filter((l) => l.includes('"type":"response.output_text.delta"')).length, N);
    assert.equal(lines.at(-1), '[DONE]');
    // with the box open, a second long answer is appended to it as it comes
    up.script({ text: pieces.slice(0, 500) });
    await page.getByLabel('Message').fill('Again, shorter');
    await page.locator('#text-send').click();
    await page
      .getByRole('status')
      .filter({ hasText: /Done \(500 output tokens\)/ })
      .waitFor({ timeout: 60_000 });
    const again = (await page.locator('#text-events').textContent())!.trimEnd().split('\n');
    assert.equal(again.filter((l) => l.includes('output_text.delta')).length, 500, 'the box holds the new answer’s events only');
    assert.equal(await page.locator('#text-answer').textContent(), pieces.slice(0, 500).join(''));
    await page.getByText(/^Raw events \(\d+\)$/).click();
    await page.getByRole('button', { name: 'New conversation' }).click();
    // measured, not asserted (the machine may be busy): the page's JavaScript time for the 4,000 events
    ctx_.diagnostic(`${N} streamed events: ${Math.round(jsMs)} ms of page JavaScript (ScriptDuration), ${wallMs} ms from Send to Done`);
    await cdp.detach();
  });

  test('speech offers every voice the server has', async () => {
    await page.getByRole('tab', { name: 'Speech' }).click();
    const voices = await page.locator('#speech-voice option').allInnerTexts();
    assert.deepEqual(voices, ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
    await page.getByLabel('Text', { exact: true }).fill('Hello.');
    await page.getByLabel('Voice').selectOption('marin');
    await page.locator('#speech-go').click();
    await page.locator('#speech-audio').waitFor();
    await check('speech');
    await page.getByRole('tab', { name: 'Text (Responses)' }).click();
  });

  test('in Chinese: the conversation and the code view', async () => {
    await page.getByLabel('Language').selectOption('zh');
    await page.getByRole('heading', { name: '试用' }).waitFor();
    await page.getByLabel('系统提示词').waitFor();
    await page.getByLabel('温度').waitFor();
    await page.getByLabel('最大输出 token 数').waitFor();
    await page.getByText('按 Ctrl+Enter 发送。').waitFor();
    await page.getByRole('button', { name: '新对话' }).waitFor();
    await check('playground in Chinese');
    await screenshot(page, 'playground-zh', true);
    await page.getByLabel('语言').selectOption('en');
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
    assert.deepEqual(a11y, []);
  });

  test('errors in plain words, in English and Chinese: a lost connection, a gateway, a server message’s category, an expired session', async () => {
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByRole('heading', { name: 'Playground' }).waitFor();
    const alert = page.locator('#play-text').getByRole('alert');
    const sendWith = async (text: string) => {
      await page.locator('#text-input').fill(text);
      await page.locator('#text-send').click();
    };
    for (const lang of ['en', 'zh'] as const) {
      const en = lang === 'en';
      if (!en) {
        await page.getByLabel('Language').selectOption('zh');
        await page.getByRole('heading', { name: '试用' }).waitFor();
      }
      // the connection fails: not the browser's "Failed to fetch"
      await page.route('**/v1/responses', (r) => r.abort('failed'));
      await sendWith('hello');
      await alert.waitFor();
      assert.equal(await alert.innerText(), en ? 'Portico cannot be reached. Check your connection and try again.' : '无法连接 Portico。请检查网络后重试。');
      await check(`network error (${lang})`);
      await page.unroute('**/v1/responses');
      // a gateway in front of Portico answers with its own page
      const gateway: Record<number, [string, string]> = {
        502: ['Portico cannot be reached through the gateway in front of it (HTTP 502). Try again in a moment.', '无法通过前面的网关连接到 Portico（HTTP 502）。请稍后重试。'],
        503: ['Portico is unavailable for a moment (HTTP 503). Try again shortly.', 'Portico 暂时不可用（HTTP 503）。请稍后重试。'],
        504: ['Portico took too long to answer (HTTP 504). Try again in a moment.', 'Portico 响应超时（HTTP 504）。请稍后重试。'],
      };
      for (const [status, words] of Object.entries(gateway)) {
        await page.route('**/v1/responses', (r) => r.fulfill({ status: Number(status), contentType: 'text/html', body: '<html><body><h1>Bad Gateway</h1></body></html>' }));
        await sendWith('hello');
        await alert.filter({ hasText: `HTTP ${status}` }).waitFor();
        assert.equal(await alert.innerText(), en ? words[0] : words[1]);
        await page.unroute('**/v1/responses');
      }
      if (en) await screenshot(page, 'error-gateway');
      // a server message: without its category prefix, as a sentence
      await page.getByLabel(en ? 'Inference key' : '推理密钥').selectOption('__paste');
      await page.getByLabel(en ? 'Key (sk-…)' : '密钥（sk-…）').fill(`sk-${'A'.repeat(38)}`);
      await sendWith('hello');
      await alert.waitFor();
      const said = await alert.innerText();
      assert.equal(said.split('\n')[0], en ? 'Invalid API key format.' : 'API 密钥格式无效。');
      assert.doesNotMatch(said, /unauthorized|未授权/);
      await check(`server error (${lang})`);
      await page.getByLabel(en ? 'Inference key' : '推理密钥').selectOption({ index: 1 });
    }
    // a portal call that fails the same way: the usage screen
    await page.route('**/v1/portal/query/usage?*', (r) => r.fulfill({ status: 502, contentType: 'text/html', body: 'bad gateway' }));
    await page.getByRole('link', { name: '用量' }).click();
    await page.getByRole('alert').filter({ hasText: '无法通过前面的网关连接到 Portico（HTTP 502）。请稍后重试。' }).waitFor();
    await page.unroute('**/v1/portal/query/usage?*');
    // an expired session says so, in the page's language, and offers the sign-in
    await t.services.db.db.updateTable('web_sessions').set({ expires_at: 1 }).where('user_id', '=', 'alice').execute();
    await page.getByRole('link', { name: 'API 密钥' }).click();
    await page.getByRole('heading', { name: '登录 Portico' }).waitFor();
    await page.getByText('会话已结束（已过期或已退出）。请重新登录以继续。').waitFor();
    await page.locator('.command').waitFor();
    await check('expired session (zh)');
    await page.getByLabel('语言').selectOption('en');
    await page.getByText('Your session has ended (it expired or was signed out). Sign in again to continue.').waitFor();
    assert.deepEqual(a11y, []);
  });

  after(() => {
    assert.deepEqual(problems, [], 'no script errors and no CSP violations');
  });
});
