/**
 * SseWriter: the events of one turn of the event loop leave in one socket write (joined, written on the next
 * tick), and events of later turns are not held back by it.
 */
import { describe, test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { SseWriter } from '../../src/platform/http/sse.js';
import { MODEL, setup, type Env } from '../responses/util.js';

/** a raw response that records what reaches the socket: writes held by a cork leave together at uncork */
class FakeRaw extends EventEmitter {
  corks = 0;
  /** what left in one go: the writes made while corked leave as one flush */
  flushes: string[][] = [];
  private held: string[] = [];
  writableEnded = false;
  writableFinished = false;
  destroyed = false;
  headers?: Record<string, string>;
  writeHead(_status: number, headers: Record<string, string>) {
    this.headers = headers;
  }
  cork() {
    this.corks++;
  }
  uncork() {
    if (this.corks === 0) return;
    this.corks--;
    if (this.corks === 0 && this.held.length) this.flushes.push(this.held.splice(0));
  }
  write(text: string) {
    if (this.corks > 0) this.held.push(text);
    else this.flushes.push([text]);
    return true;
  }
  end(text?: string) {
    // end() writes what a cork holds back, with its last chunk
    this.corks = 0;
    this.held.push(...(text === undefined ? [] : [text]));
    if (this.held.length) this.flushes.push(this.held.splice(0));
    this.writableEnded = true;
  }
}

function writer() {
  const raw = new FakeRaw();
  const req = { id: 'req_sse', headers: {}, server: { server: {} } } as unknown as FastifyRequest;
  const reply = { raw, hijack() {} } as unknown as FastifyReply;
  return { raw, sse: new SseWriter(req, reply) };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

describe('SseWriter', () => {
  test('the events written in one turn leave in one write, at the end of that turn', async () => {
    const { raw, sse } = writer();
    sse.event({ type: 'response.created' });
    sse.event({ type: 'response.in_progress' });
    sse.data({ x: 1 });
    assert.equal(raw.flushes.length, 0, 'held until the turn ends');
    await Promise.resolve();
    await tick();
    assert.equal(raw.corks, 0, 'uncorked');
    assert.deepEqual(raw.flushes, [
      ['event: response.created\ndata: {"type":"response.created"}\n\nevent: response.in_progress\ndata: {"type":"response.in_progress"}\n\ndata: {"x":1}\n\n'],
    ]);
    // a later turn: its own write, not held back by the first
    sse.event({ type: 'response.completed' });
    await tick();
    assert.equal(raw.flushes.length, 2);
    assert.deepEqual(raw.flushes[1], ['event: response.completed\ndata: {"type":"response.completed"}\n\n']);
  });

  test('events of a turn that ends the stream leave with the end; nothing is written after it', async () => {
    const { raw, sse } = writer();
    sse.event({ type: 'a' });
    sse.end();
    sse.event({ type: 'after-end' });
    await tick();
    assert.deepEqual(raw.flushes, [['event: a\ndata: {"type":"a"}\n\ndata: [DONE]\n\n']]);
    assert.equal(raw.corks, 0);
  });

  test('promise jobs of the same turn (an async loop over ready events) join the same write', async () => {
    const { raw, sse } = writer();
    async function* events() {
      for (const type of ['one', 'two', 'three']) yield { type };
    }
    await sse.pipe(events(), () => ({ code: 'x', message: 'x' }));
    await tick();
    assert.equal(raw.flushes.length, 1, JSON.stringify(raw.flushes));
    assert.deepEqual(raw.flushes[0], ['event: one\ndata: {"type":"one"}\n\nevent: two\ndata: {"type":"two"}\n\nevent: three\ndata: {"type":"three"}\n\ndata: [DONE]\n\n']);
  });
});

describe('SseWriter over HTTP', () => {
  let e: Env;
  before(async () => {
    e = await setup('pglite');
  });
  after(() => e.close());

  test('an event reaches the client when the upstream sends it, not when the stream ends', async () => {
    // 250 ms between the upstream's events: the first delta must arrive long before the last
    e.up.script({ text: ['one ', 'two ', 'three'], delayMs: 250 });
    const res = await e.call('POST', '/v1/responses', { model: MODEL, input: 'count', stream: true });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const seen: Array<{ at: number; text: string }> = [];
    const start = performance.now();
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const chunk = Buffer.from(value).toString('utf8');
      text += chunk;
      seen.push({ at: performance.now() - start, text: chunk });
    }
    const firstDelta = seen.find((s) => s.text.includes('"delta":"one "'));
    const completed = seen.find((s) => s.text.includes('event: response.completed'));
    assert.ok(firstDelta && completed, text);
    assert.ok(completed.at - firstDelta.at >= 300, `the first delta came ${firstDelta.at.toFixed(0)} ms in, the end ${completed.at.toFixed(0)} ms in`);
    assert.ok(text.endsWith('data: [DONE]\n\n'));
  });
});
