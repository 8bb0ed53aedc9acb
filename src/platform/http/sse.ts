import type { FastifyReply, FastifyRequest } from 'fastify';
import { clientGone } from './client-gone.js';

/**
 * Server-Sent Events on the raw socket: `event: <type>\ndata: <json>\n\n`, one write per event, LF only.
 * The reply is hijacked, so Fastify sends nothing else on it.
 */
export class SseWriter {
  private started = false;
  /** aborted when the client goes away before the stream ends: stop the work behind the stream */
  readonly closed: AbortSignal;

  constructor(
    private readonly req: FastifyRequest,
    private readonly reply: FastifyReply,
  ) {
    this.closed = clientGone(reply).signal;
    reply.raw.once('close', () => {
      if (this.started) req.server.metrics?.activeStreams.dec();
    });
  }

  start() {
    if (this.started) return;
    this.started = true;
    this.req.server.metrics?.activeStreams.inc();
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': this.req.id,
    });
  }

  get isStarted() {
    return this.started;
  }

  event(e: { type: string }) {
    if (!this.started) this.start();
    if (this.reply.raw.writableEnded || this.reply.raw.destroyed) return;
    this.reply.raw.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
  }

  /** A data-only event (`data: <json>\n\n`, no event line), as Chat Completions streams have them. */
  data(payload: unknown) {
    if (!this.started) this.start();
    if (this.reply.raw.writableEnded || this.reply.raw.destroyed) return;
    this.reply.raw.write(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /**
   * Writes every event of `events`. An error before the first event is thrown (the caller answers it as a
   * plain HTTP error); after it, the stream ends with an `error` event, so a client never waits on a stream
   * nobody writes to anymore.
   */
  async pipe(events: AsyncIterable<{ type: string; sequence_number?: number }>, onError: (e: unknown) => { code: string; message: string }) {
    let last = -1;
    try {
      for await (const e of events) {
        if (typeof e.sequence_number === 'number') last = e.sequence_number;
        this.event(e);
      }
      this.end();
    } catch (err) {
      if (this.closed.aborted) return;
      if (!this.started) throw err;
      const { code, message } = onError(err);
      this.event({ type: 'error', code, message, param: null, sequence_number: last + 1 } as { type: string });
      this.end(false);
    }
  }

  end(done = true) {
    if (!this.started) this.start();
    if (this.reply.raw.writableEnded || this.reply.raw.destroyed) return;
    this.reply.raw.end(done ? 'data: [DONE]\n\n' : undefined);
  }
}
