import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { sendAsset, type WebContext } from '../context.js';

/** Paths that answer the page (its router shows the screen); the API keeps every other path. */
export const PAGE_PATHS = ['/', '/signin', '/keys', '/usage', '/playground', '/console', '/console/*'];

/** GET / (and the page's other paths): the page's HTML. */
export default function (app: FastifyInstance, ctx: WebContext) {
  const index = async (req: FastifyRequest, reply: FastifyReply) => {
    if (!ctx.page.index) return reply.code(503).type('text/plain; charset=utf-8').send('The web page is not built: run npm run build, then restart Portico.\n');
    // the HTML names the hashed assets: always revalidated, so a new build is picked up at once
    return sendAsset(req, reply, ctx.page.index, 'no-cache');
  };
  for (const p of PAGE_PATHS) app.get(p, { schema: { hide: true } }, index);
}
