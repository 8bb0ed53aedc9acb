import type { FastifyReply } from 'fastify';

/**
 * An AbortSignal that fires when the client goes away before its answer is finished (JSON answers and audio
 * streams; an event stream's SseWriter applies the same rule, a close before the answer is finished, to the one
 * controller it also aborts when the server stops the stream). `release` stops listening once the answer no
 * longer needs it.
 */
export function clientGone(reply: FastifyReply): { signal: AbortSignal; release: () => void } {
  const ac = new AbortController();
  const raw = reply.raw;
  const onClose = () => {
    if (!raw.writableFinished) ac.abort(new Error('client disconnected'));
  };
  // gone already (it left while the request was being prepared): the work is stopped before it starts
  if (raw.destroyed) onClose();
  else raw.on('close', onClose);
  return { signal: ac.signal, release: () => raw.off('close', onClose) };
}
