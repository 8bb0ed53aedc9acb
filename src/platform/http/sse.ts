import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Server-Sent Events on the raw socket: `event: <type>\ndata: <json>\n\n`, one write per event, LF only.
 * The reply is hijacked, so Fastify sends nothing else on it.
 */
export class SseWriter {
  private started = false;
  readonly closed: AbortSignal;
  private readonly ac = new AbortController();

  constructor(
    private readonly req: FastifyRequest,
    private readonly reply: FastifyReply,
  ) {
    this.closed = this.ac.signal;
    // the client went away: stop the work behind the stream
    reply.raw.on('close', () => {
      this.ac.abort(new Error('client disconnected'));
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

  end(done = true) {
    if (!this.started) this.start();
    if (this.reply.raw.writableEnded || this.reply.raw.destroyed) return;
    this.reply.raw.end(done ? 'data: [DONE]\n\n' : undefined);
  }
}
