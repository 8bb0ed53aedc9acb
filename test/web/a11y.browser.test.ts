/**
 * The page for people who use a keyboard only, a screen reader or a phone, and the playground's audio: speech
 * played in the page, transcription of an uploaded file and of the microphone (Chromium's fake device).
 * One browser for the file; one page per scenario, reused across its steps.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser, Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { launchChromium, screenshot, signInLink, watchConsole } from '../helpers/browser.js';
import { wordErrorRate } from '../audio/helpers.js';

/** Every visible control without an accessible name (label, aria-label, aria-labelledby, or text for buttons). */
function unlabelled(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const bad: string[] = [];
    const visible = (el: Element) => (el as HTMLElement).offsetParent !== null || el.closest('dialog[open]') !== null;
    for (const el of document.querySelectorAll('input, select, textarea, button, a[href], [role=img], [role=tab]')) {
      if (!visible(el) || (el as HTMLInputElement).type === 'hidden') continue;
      const named =
        el.getAttribute('aria-label') ||
        el.getAttribute('aria-labelledby') ||
        ((el as HTMLInputElement).labels?.length ?? 0) > 0 ||
        ((el.tagName === 'BUTTON' || el.tagName === 'A' || el.getAttribute('role') === 'tab') && (el as HTMLElement).innerText.trim() !== '');
      if (!named) bad.push(el.outerHTML.slice(0, 120));
    }
    return bad;
  });
}

const overflow = (page: Page) => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);

describe('accessibility, phone-sized screens and the playground’s audio in Chromium', () => {
  let t: TestApp & { url?: string };
  let browser: Browser;

  before(async () => {
    t = await buildTestApp({ listen: true });
    browser = await launchChromium(['--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream']);
  });
  after(async () => {
    await browser?.close();
    await t?.close();
  });

  test('keyboard only: skip link, create a key, copy it, close with Escape, switch tabs, revoke with confirmation', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: t.url });
    const page = await ctx.newPage();
    const problems = watchConsole(page);
    await page.goto(await signInLink(t, 'kim'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent?.trim() || document.activeElement?.tagName);
    assert.equal(await focused(), 'API keys', 'the screen’s heading has the focus');
    // the skip link is the first stop of the page: going back from the heading reaches it, and nothing before it
    for (let i = 0; i < 12 && (await focused()) !== 'Skip to content'; i++) await page.keyboard.press('Shift+Tab');
    assert.equal(await focused(), 'Skip to content');
    assert.equal(await page.evaluate(() => document.querySelector('a[href], button, input, select, textarea')?.textContent), 'Skip to content');
    await page.keyboard.press('Enter');
    const tabTo = async (id: string) => {
      for (let i = 0; i < 30 && (await focused()) !== id; i++) await page.keyboard.press('Tab');
      assert.equal(await focused(), id, `reached ${id} with Tab`);
    };
    await tabTo('create-key');
    await page.keyboard.press('Enter');
    assert.equal(await focused(), 'new-name', 'the dialog starts at its first field');
    await page.keyboard.type('keyboard key');
    await page.keyboard.press('Tab');
    assert.equal(await focused(), 'new-description');
    await page.keyboard.press('Enter');
    await page.keyboard.press('Shift+Tab');
    await page.keyboard.press('Enter');
    await page.locator('#created-dialog').getByText('It will not be shown again').waitFor();
    await tabTo('copy-key');
    await page.keyboard.press('Enter');
    await page.getByText('Copied to the clipboard.').waitFor();
    assert.match(await page.evaluate(() => navigator.clipboard.readText()), /^sk-/);
    // the page behind the modal dialog is inert: Tab never reaches it (past the last control focus may go to the
    // browser's own controls, then comes back)
    for (let i = 0; i < 8; i++) {
      await page.keyboard.press('Tab');
      const where = await page.evaluate(() =>
        document.activeElement === document.body || !document.activeElement
          ? 'browser'
          : document.activeElement.closest('#created-dialog')
            ? 'dialog'
            : document.activeElement.outerHTML.slice(0, 80),
      );
      assert.ok(where === 'dialog' || where === 'browser', `Tab reached the page behind the dialog: ${where}`);
    }
    await page.keyboard.press('Escape');
    assert.equal(await page.locator('dialog[open]').count(), 0);
    assert.equal(await focused(), 'create-key', 'focus returns to what opened the dialog');
    // tabs: arrow keys move between the kinds of key
    await tabTo('tab-api_keys');
    await page.keyboard.press('ArrowRight');
    assert.equal(await focused(), 'tab-management_api_keys');
    assert.equal(await page.locator('#tab-management_api_keys').getAttribute('aria-selected'), 'true');
    await page.getByText('No keys yet.').waitFor();
    await page.keyboard.press('ArrowLeft');
    await page.locator('.key-name', { hasText: 'keyboard key' }).waitFor();
    // revoke by keyboard; the confirmation starts on Cancel
    await page.getByRole('button', { name: 'Revoke keyboard key' }).focus();
    await page.keyboard.press('Enter');
    assert.equal(await focused(), 'Cancel');
    await page.keyboard.press('Shift+Tab');
    assert.equal(await focused(), 'confirm-yes');
    await page.keyboard.press('Enter');
    await page.getByText('Key “keyboard key” revoked.').waitFor();
    // the navigation works from the keyboard too
    await page.getByRole('link', { name: 'Usage' }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Usage and balance' }).waitFor();
    assert.equal(await focused(), 'Usage and balance');
    assert.deepEqual(problems, []);
    await ctx.close();
  });

  test('every control has a label on every screen, in both languages', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await ctx.newPage();
    await page.goto(`${t.url}/signin`);
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    assert.deepEqual(await unlabelled(page), [], 'sign-in');
    await t.services.inferenceKeys.create({ userId: 'lee', orgRoles: {} }, { name: 'one' });
    await page.goto(await signInLink(t, 'lee', { acme: 'admin', beta: 'member' }));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    for (const lang of ['en', 'zh']) {
      await page.locator('#language').selectOption(lang);
      await page.locator('header nav a').first().click();
      await page.locator('.key-name').first().waitFor();
      assert.deepEqual(await unlabelled(page), [], `keys (${lang})`);
      await page.locator('#create-key').click();
      await page.locator('#create-dialog[open]').waitFor();
      assert.deepEqual(await unlabelled(page), [], `create dialog (${lang})`);
      await page.keyboard.press('Escape');
      await page.locator('header nav a').nth(1).click();
      await page.locator('#usage-from').waitFor();
      assert.deepEqual(await unlabelled(page), [], `usage (${lang})`);
      await page.locator('header nav a').nth(2).click();
      for (const tab of ['text', 'speech', 'transcription']) {
        await page.locator(`#play-tab-${tab}`).click();
        assert.deepEqual(await unlabelled(page), [], `playground ${tab} (${lang})`);
      }
    }
    await page.locator('#language').selectOption('en');
    await ctx.close();
  });

  test('a phone-sized screen (390x844): nothing wider than the screen, every screen usable', async () => {
    const ctx = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    const page = await ctx.newPage();
    await page.goto(`${t.url}/signin`);
    await page.getByRole('heading', { name: 'Sign in to Portico' }).waitFor();
    assert.ok((await overflow(page)) <= 0, 'sign-in fits');
    await page.goto(await signInLink(t, 'max', { acme: 'admin' }));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    for (const name of ['phone', 'tablet with a rather long name to wrap'])
      await t.services.inferenceKeys.create({ userId: 'max', orgRoles: {} }, { name, description: 'a key', scopes: ['responses', 'audio'] });
    await page.reload();
    await page.locator('.key-name').first().waitFor();
    assert.ok((await overflow(page)) <= 0, `keys fit (overflow ${await overflow(page)} px)`);
    const revoke = page.getByRole('button', { name: 'Revoke phone' });
    await revoke.scrollIntoViewIfNeeded();
    const box = (await revoke.boundingBox())!;
    assert.ok(box.x >= 0 && box.x + box.width <= 390, 'actions are on screen');
    assert.ok(box.height >= 30, 'buttons are big enough to tap');
    await page.evaluate(() => window.scrollTo(0, 0));
    await screenshot(page, 'phone-keys');
    await page.locator('#create-key').tap();
    await page.locator('#create-dialog[open]').waitFor();
    const dialog = (await page.locator('#create-dialog').boundingBox())!;
    assert.ok(dialog.x >= 0 && dialog.x + dialog.width <= 390, 'the dialog fits');
    await page.locator('#create-dialog').getByLabel('Name').fill('from the phone');
    await page.locator('#create-dialog').getByRole('button', { name: 'Create key' }).tap();
    await page.locator('#created-dialog').getByText('It will not be shown again').waitFor();
    await page.locator('#created-dialog').getByRole('button', { name: 'I have saved it' }).tap();
    for (const [link, heading] of [
      ['Usage', 'Usage and balance'],
      ['Playground', 'Playground'],
    ]) {
      await page.getByRole('link', { name: link }).tap();
      await page.getByRole('heading', { name: heading }).waitFor();
      assert.ok((await overflow(page)) <= 0, `${link} fits`);
    }
    await screenshot(page, 'phone-playground');
    await ctx.close();
  });

  test('the playground speaks (played in the page) and transcribes an upload and the microphone', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await ctx.grantPermissions(['microphone'], { origin: t.url });
    const page = await ctx.newPage();
    const problems = watchConsole(page);
    await page.goto(await signInLink(t, 'nia'));
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByRole('button', { name: 'Use a playground key' }).click();
    await page.waitForFunction(() => (document.querySelector('#play-key') as HTMLSelectElement).selectedOptions[0]?.textContent?.startsWith('Playground (sk-'));

    await page.getByRole('tab', { name: 'Speech' }).click();
    const sentence = "The weather today is sunny and warm. Please call me tomorrow morning at nine o'clock.";
    for (const format of ['wav', 'pcm', 'mp3']) {
      await page.getByLabel('Text', { exact: true }).fill(sentence);
      await page.getByLabel('Voice').selectOption('alloy');
      await page.getByLabel('Format').selectOption(format);
      await page.getByLabel('Speed').fill('1.25');
      // this format's audio, not the one before it (pcm is offered as speech.wav, as wav was)
      const before = await page.evaluate(() => document.querySelector<HTMLAudioElement>('#speech-audio')?.src ?? '');
      await page.getByRole('button', { name: 'Speak' }).click();
      await page.waitForFunction((prev) => {
        const src = document.querySelector<HTMLAudioElement>('#speech-audio')?.src;
        return !!src && src !== prev;
      }, before);
      await page.getByRole('link', { name: new RegExp(`Download speech\\.${format === 'pcm' ? 'wav' : format}`) }).waitFor();
      // the browser decodes it: a real, playable duration
      const duration = await page.locator('#speech-audio').evaluate(
        (a: HTMLAudioElement) =>
          new Promise<number>((resolve, reject) => {
            if (a.readyState >= 1 && Number.isFinite(a.duration)) return resolve(a.duration);
            a.onloadedmetadata = () => resolve(a.duration);
            a.onerror = () => reject(new Error(`audio error ${a.error?.code}`));
          }),
      );
      assert.ok(duration > 2 && duration < 10, `${format}: ${duration} s of speech`);
    }
    await screenshot(page, 'speech');
    // a wav of the same sentence, uploaded for transcription
    const key = await t.inferenceKey('nia');
    const speech = await fetch(`${t.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: sentence, response_format: 'wav' }),
    });
    const wav = Buffer.from(await speech.arrayBuffer());
    await page.getByRole('tab', { name: 'Transcription' }).click();
    await page.getByLabel('Audio file').setInputFiles({ name: 'weather.wav', mimeType: 'audio/wav', buffer: wav });
    await page.getByText(/Audio: weather\.wav \(\d+ kB\)/).waitFor();
    await page.getByLabel('Response format').selectOption('text');
    await page.getByRole('button', { name: 'Transcribe' }).click();
    const text = await page.locator('#stt-result').innerText();
    assert.ok(wordErrorRate(sentence, text) <= 0.25, `transcribed: ${text}`);
    await page.getByLabel('Response format').selectOption('srt');
    await page.getByRole('button', { name: 'Transcribe' }).click();
    await page.locator('#stt-result', { hasText: '-->' }).waitFor();
    await screenshot(page, 'transcription');
    // the microphone (Chromium's fake device plays a tone): recorded in the page, sent as webm
    await page.getByRole('button', { name: 'Record from the microphone' }).click();
    await page.getByRole('button', { name: 'Stop recording' }).waitFor();
    // 2 s of recording for the 1 s asserted below: the fake device's start-up is not counted against it
    await page.waitForTimeout(2000);
    await page.getByRole('button', { name: 'Stop recording' }).click();
    await page.getByText(/Audio: recording\.(webm|ogg) \(\d+ kB\)/).waitFor();
    await page.getByLabel('Response format').selectOption('json');
    await page.getByRole('button', { name: 'Transcribe' }).click();
    const json = JSON.parse(await page.locator('#stt-result').innerText());
    assert.equal(typeof json.text, 'string');
    assert.equal(json.usage.type, 'duration');
    assert.ok(json.usage.seconds >= 1, `recorded ${json.usage.seconds} s`);
    // a model that does not take that format: the API's message is shown
    await page.getByLabel('Model').selectOption('gpt-4o-transcribe');
    await page.getByLabel('Response format').selectOption('srt');
    await page.getByRole('button', { name: 'Transcribe' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: /not compatible with model 'gpt-4o-transcribe'. Use json or text/ })
      .waitFor();
    assert.deepEqual(problems, []);
    await ctx.close();
  });
});
