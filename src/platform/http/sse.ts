import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Server } from 'node:http';
import { AppError } from '../errors.js';

/** the streams being written, per HTTP server: what a shutdown past its grace period stops (stopStreams) */
const active = new WeakMap<object, Set<SseWriter>>();

/**
 * Stops every stream of `server` that is still being written: each gets a final error event (`err`) and ends,
 * and the work behind it is aborted (what was generated is charged, as when a client leaves). Returns a
 * promise that settles when all of them have closed, and how many there were.
 */
export function stopStreams(server: Server, err: AppError): { count: number; closed: Promise<void> } {
  const set = active.get(server);
  if (!set?.size) return { count: 0, closed: Promise.resolve() };
  const writers = [...set];
  const closed = Promise.all(writers.map((w) => w.stop(err))).then(() => {});
  return { count: writers.length, closed };
}

/**
 * Server-Sent Events on the raw socket: `event: <type>\ndata: <json>\n\n`, LF only. The reply is hijacked, so
 * Fastify sends nothing else on it.
 *
 * The events written in one turn of the event loop leave in one socket write: they are joined into one text and
 * a nextTick writes it, after the promise jobs of that turn (the consumer's loop over the events an upstream chunk
 * gave) have run. A stream of a dozen events that arrive together thus costs one write system call instead of a
 * dozen, and one chunk of the chunked encoding (one response write: its length line, the text, its CRLF) instead
 * of a dozen; the first event waits for nothing but the end of its own turn.
 */
export class SseWriter {
  private started = false;
  /** aborted when the client goes away before the stream ends, or the server stops it: stop the work behind the stream */
  readonly closed: AbortSignal;
  /** one controller for both causes (a client that left, a server that stops the stream): the first one wins */
  private readonly ctl = new AbortController();
  private left = false;
  private stopped: AppError | undefined;
  private readonly done: Promise<void>;

  constructor(
    private readonly req: FastifyRequest,
    private readonly reply: FastifyReply,
  ) {
    this.closed = this.ctl.signal;
    let set = active.get(req.server.server);
    if (!set) active.set(req.server.server, (set = new Set()));
    set.add(this);
    this.done = new Promise((resolve) => {
      const onClose = () => {
        // closed before the answer was finished: the client went away (src/platform/http/client-gone.ts)
        if (!reply.raw.writableFinished) {
          this.left = true;
          this.ctl.abort(new Error('client disconnected'));
        }
        if (this.started) req.server.metrics?.activeStreams.dec();
        active.get(req.server.server)?.delete(this);
        resolve();
      };
      // gone already (it left while the request was being prepared): nothing is generated for nobody
      if (reply.raw.destroyed) onClose();
      else reply.raw.once('close', onClose);
    });
  }

  /** the client went away (as opposed to the server stopping the stream) */
  get clientLeft(): boolean {
    return this.left;
  }

  /** why the server stopped the stream (shutdown), if it did */
  get stoppedWith(): AppError | undefined {
    return this.stopped;
  }

  /**
   * The server stops the stream (shutdown past its grace period): the work behind it is aborted, the route's
   * pipe writes the final error event and ends (or answers 503 when nothing was sent yet). Resolves when the response has closed (cut after 1 s if the
   * route does not end it).
   */
  stop(err: AppError): Promise<void> {
    if (this.stopped === undefined) {
      this.stopped = err;
      this.ctl.abort(err);
    }
    const cut = setTimeout(() => this.reply.raw.destroy(), 1000);
    return this.done.finally(() => clearTimeout(cut));
  }

  start() {
    if (this.started) return;
    this.started = true;
    // (a stream started after its client left was never counted, and is not uncounted at its close)
    if (!this.left) this.req.server.metrics?.activeStreams.inc();
    this.reply.hijack();
    // a client that asked to close (Connection: close) has the connection closed after the stream
    const close = /(^|,)\s*close\s*(,|$)/i.test(String(this.req.headers.connection ?? ''));
    this.reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: close ? 'close' : 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': this.req.id,
      // the routing so far (the first output has come: the deployment that serves is known)
      ...this.req.facts?.routeHeaders(),
    });
  }

  get isStarted() {
    return this.started;
  }

  event(e: { type: string }) {
    this.write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
  }

  /** A data-only event (`data: <json>\n\n`, no event line), as Chat Completions streams have them. */
  data(payload: unknown) {
    this.write(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /** the text of this turn's events, written at its end (nextTick after the first event of a turn) */
  private pending = '';

  private write(text: string) {
    if (!this.started) this.start();
    const raw = this.reply.raw;
    if (raw.writableEnded || raw.destroyed) return;
    if (this.pending === '') {
      this.pending = text;
      process.nextTick(flushPending, this);
    } else this.pending += text;
  }

  /** the turn's events leave together (nextTick after the first write of a turn) */
  flush() {
    const text = this.pending;
    if (text === '') return;
    this.pending = '';
    const raw = this.reply.raw;
    if (raw.writableEnded || raw.destroyed) return;
    raw.write(text);
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
      if (this.clientLeft) return;
      const stopped = this.stoppedWith;
      // nothing sent yet: a plain HTTP error (503 when the server stopped it)
      if (!this.started) throw stopped ?? err;
      const { code, message } = stopped ? { code: stopped.openaiCode, message: stopped.message } : onError(err);
      this.event({ type: 'error', code, message, param: null, sequence_number: last + 1 } as { type: string });
      this.end(false);
    }
  }

  end(done = true) {
    if (!this.started) this.start();
    const raw = this.reply.raw;
    if (raw.writableEnded || raw.destroyed) return;
    // the turn's events not written yet leave with the last chunk
    const text = done ? this.pending + 'data: [DONE]\n\n' : this.pending;
    this.pending = '';
    if (text === '') raw.end();
    else raw.end(text);
  }
}

function flushPending(w: SseWriter) {
  w.flush();
}
