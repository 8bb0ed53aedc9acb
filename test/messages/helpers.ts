/** A listening Portico in front of a scripted upstream (test/chat/helpers.ts), with Anthropic's official SDK as the client. */
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { setupChat, type ChatEnv } from '../chat/helpers.js';

export { MODEL, VIA_RESPONSES, PRICING } from '../chat/helpers.js';

export interface MessagesEnv extends ChatEnv {
  /** Anthropic's SDK with the inference key (sent as x-api-key), no retries */
  anthropic: Anthropic;
  /** another Anthropic client for `apiKey` (or a bearer token with authToken) */
  clientFor(opts: { apiKey?: string | null; authToken?: string | null }): Anthropic;
}

export async function setupMessages(opts: Parameters<typeof setupChat>[0] = {}): Promise<MessagesEnv> {
  const e = await setupChat(opts);
  const clientFor = (o: { apiKey?: string | null; authToken?: string | null }) =>
    new Anthropic({ baseURL: e.url, apiKey: o.apiKey ?? null, authToken: o.authToken ?? null, maxRetries: 0, timeout: 60_000 });
  return Object.assign(e, { anthropic: clientFor({ apiKey: e.key }), clientFor });
}

/** Asserts an answer in Anthropic's error shape and returns its `error`. */
export async function expectAnthropicError(res: Response, status: number, type: string): Promise<{ type: string; message: string }> {
  const text = await res.text();
  assert.equal(res.status, status, `expected HTTP ${status}, got ${res.status}: ${text}`);
  const body = JSON.parse(text);
  assert.deepEqual(Object.keys(body).sort(), ['error', 'request_id', 'type'], text);
  assert.equal(body.type, 'error');
  assert.deepEqual(Object.keys(body.error).sort(), ['message', 'type'], text);
  assert.equal(body.error.type, type, text);
  assert.ok(body.error.message.length > 0);
  assert.equal(body.request_id, res.headers.get('x-request-id'));
  return body.error;
}

/** The events of an Anthropic stream as sent: each block one `event:` line and one `data:` line whose type matches. */
export async function readAnthropicStream(res: Response): Promise<any[]> {
  assert.equal(res.status, 200, `stream answered ${res.status}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const text = await res.text();
  const events: any[] = [];
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    const lines = block.split('\n');
    assert.equal(lines.length, 2, `event and data lines: ${JSON.stringify(block)}`);
    assert.ok(lines[0]!.startsWith('event: ') && lines[1]!.startsWith('data: '), block);
    const data = JSON.parse(lines[1]!.slice(6));
    assert.equal(data.type, lines[0]!.slice(7));
    events.push(data);
  }
  return events;
}
