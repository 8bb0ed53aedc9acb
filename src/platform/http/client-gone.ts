import type { FastifyReply } from 'fastify';

/**
 * An AbortSignal that fires when the client goes away before its answer is finished (the one place a
 * disconnect is noticed: JSON answers, event streams and audio streams alike). `release` stops listening once
 * the answer no longer needs it.
 */
export function clientGone(reply: FastifyReply): { signal: AbortSignal; release: () => void } {
  const ac = new AbortController();
  const raw = reply.raw;
  const onClose = () => {
    if (!raw.writableFinished) ac.abort(new Error('client disconnected'));
  };
  raw.on('close', onClose);
  return { signal: ac.signal, release: () => raw.off('close', onClose) };
}
