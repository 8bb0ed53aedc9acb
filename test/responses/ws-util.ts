/** A raw `ws` client for the WebSocket mode tests: frames in order, answers read one by one. */
import assert from 'node:assert/strict';
import WebSocket from 'ws';

/** the events that end a response */
export const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

export const wsUrl = (httpUrl: string) => httpUrl.replace(/^http/, 'ws') + '/v1/responses';

export class WsClient {
  /** every frame received, parsed (binary frames as { binary }) */
  readonly frames: any[] = [];
  private cursor = 0;
  private wakers: Array<() => void> = [];
  closeInfo: { code: number; reason: string } | undefined;
  readonly closed: Promise<{ code: number; reason: string }>;

  constructor(readonly ws: WebSocket) {
    ws.on('message', (d, binary) => {
      this.frames.push(binary ? { binary: d } : JSON.parse(d.toString()));
      this.wake();
    });
    this.closed = new Promise((resolve) =>
      ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        resolve(this.closeInfo);
        this.wake();
      }),
    );
    ws.on('error', () => {});
  }

  private wake() {
    for (const w of this.wakers.splice(0)) w();
  }

  send(body: unknown) {
    this.ws.send(typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body));
  }

  create(body: Record<string, unknown>) {
    this.send({ type: 'response.create', ...body });
  }

  /** the next frame (fails after `ms`, or if the socket closes first) */
  async next(ms = 10_000): Promise<any> {
    const end = Date.now() + ms;
    while (this.cursor >= this.frames.length) {
      if (this.closeInfo) assert.fail(`the socket closed (${this.closeInfo.code} ${this.closeInfo.reason}) while a frame was awaited`);
      const left = end - Date.now();
      if (left <= 0) assert.fail('timed out waiting for a frame');
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.wakers.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    return this.frames[this.cursor++];
  }

  /**
   * The frames of the next answer: a response's events up to its terminal event, or one error frame given
   * instead of a response (no sequence_number).
   */
  async answer(ms = 10_000): Promise<any[]> {
    const out: any[] = [];
    for (;;) {
      const f = await this.next(ms);
      out.push(f);
      if (TERMINAL.has(f.type) || (f.type === 'error' && f.sequence_number === undefined)) return out;
    }
  }

  /** sends one response.create and reads its answer */
  async turn(body: Record<string, unknown>, ms?: number): Promise<any[]> {
    this.create(body);
    return this.answer(ms);
  }

  /** frames received and not yet read */
  get unread() {
    return this.frames.slice(this.cursor);
  }

  close(code?: number) {
    this.ws.close(code);
    return this.closed;
  }
}

export async function openWs(url: string, key: string | undefined, opts: WebSocket.ClientOptions = {}): Promise<WsClient> {
  const ws = new WebSocket(wsUrl(url), { ...opts, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...opts.headers } });
  const c = new WsClient(ws);
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    ws.once('error', reject);
  });
  return c;
}

/** An upgrade the server refuses: its HTTP status, headers and JSON body. */
export async function refusedUpgrade(
  url: string,
  headers: Record<string, string>,
  path = '/v1/responses',
): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  const ws = new WebSocket(url.replace(/^http/, 'ws') + path, { headers });
  ws.on('error', () => {});
  return new Promise((resolve, reject) => {
    ws.once('open', () => {
      ws.terminate();
      reject(new Error('the upgrade was accepted'));
    });
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text ? JSON.parse(text) : undefined });
        ws.terminate();
      });
    });
  });
}

/** the answer's terminal event, asserting it is one */
export function finalOf(answer: any[]): any {
  const last = answer[answer.length - 1];
  assert.ok(TERMINAL.has(last.type), `expected a terminal event, got ${JSON.stringify(last).slice(0, 400)}`);
  return last.response;
}

/** the answer's single error frame, asserting the envelope of the Open Responses specification */
export function errorOf(answer: any[], status?: number, code?: string, param?: string | null): any {
  assert.equal(answer.length, 1, `expected one error frame, got ${answer.map((f) => f.type).join(', ')}`);
  const f = answer[0];
  assert.equal(f.type, 'error', JSON.stringify(f));
  assert.equal(typeof f.status, 'number');
  assert.ok(f.error && typeof f.error.code === 'string' && typeof f.error.message === 'string' && f.error.message.length > 0, JSON.stringify(f));
  assert.ok('param' in f.error && typeof f.error.type === 'string', JSON.stringify(f));
  // the flat fields of the SSE error event, for clients that read those
  assert.equal(f.code, f.error.code);
  assert.equal(f.message, f.error.message);
  assert.ok(f.status < 500 || status !== undefined, `a client's bad input must not be a 5xx: ${JSON.stringify(f)}`);
  if (status !== undefined) assert.equal(f.status, status, JSON.stringify(f));
  if (code !== undefined) assert.equal(f.error.code, code, JSON.stringify(f));
  if (param !== undefined) assert.equal(f.error.param, param, JSON.stringify(f));
  return f.error;
}
