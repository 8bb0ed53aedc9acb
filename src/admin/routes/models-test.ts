import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { ModelParams, ModelTestBody, ModelTestSchema } from '../schemas.js';
import type { AdminContext } from '../context.js';

/**
 * POST /v1/admin/models/{name}/test: one small real request to one deployment of any model (no breaker, retry or
 * fallback; charged to nobody); an upstream's failure is `ok: false` with its error, still HTTP 200.
 */
export default function (app: FastifyInstance, { models }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/models/:name/test',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Send one small request to a deployment and see the answer, the latency or the error',
        params: ModelParams,
        body: ModelTestBody,
        response: { 200: envelope(ModelTestSchema) },
      },
      // no body at all asks for the first deployment, as {} does
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req) => ok(req, await models.test(req.params.name, req.body.deployment)),
  );
}
