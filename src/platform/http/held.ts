/**
 * What a request holds while it lasts (a place of its key's concurrency: src/platform/cluster/limits.ts), given back
 * exactly once when it ends, whatever ends it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Calls `release` once when the request is over: for an HTTP request, when its response closes (answered, failed,
 * refused, or abandoned by its client: Node emits the response's `close` in every case); for a WebSocket upgrade,
 * when its socket closes (an accepted WebSocket holds it for its whole life; a refused upgrade's socket is closed
 * after the answer). `release` must be idempotent: it is also called at once when the end came before this was set.
 */
export function releaseWhenEnded(req: FastifyRequest, reply: FastifyReply, release: () => void): void {
  if (req.ws) {
    const socket = req.raw.socket as FastifyRequest['raw']['socket'] | null;
    if (socket) {
      socket.once('close', release);
      if (socket.destroyed) release();
      return;
    }
  }
  const res = reply.raw;
  res.once('close', release);
  if (res.closed) release();
}
