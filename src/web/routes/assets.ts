import type { FastifyInstance } from 'fastify';
import { sendAsset, type WebContext } from '../context.js';

/** GET /assets/{file}: the page's scripts, styles and images, by their hashed names. */
export default function (app: FastifyInstance, ctx: WebContext) {
  app.get('/assets/:file', { schema: { hide: true } }, async (req, reply) => {
    const a = ctx.page.files.get((req.params as { file: string }).file);
    if (!a) return reply.code(404).type('text/plain; charset=utf-8').send('not found\n');
    // names carry the content's hash: cached for a year, never revalidated
    return sendAsset(req, reply, a, 'public, max-age=31536000, immutable');
  });
}
