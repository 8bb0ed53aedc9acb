import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { AppError, msg } from '../../../platform/errors.js';
import { envelope, ok } from '../../../platform/http/portal-envelope.js';
import { KeyIdParams, KeyRecordSchema, UpdateKeyBody } from '../schemas.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, { service, base, tag }: KeyRoutesDeps) {
  // what a key's owner may change: an inference key's concurrency too (management keys do not call {base_url})
  const inference = service.kind === 'inference';
  const updatable = inference ? ['name', 'description', 'max_concurrency'] : ['name', 'description'];
  app.withTypeProvider<TypeBoxTypeProvider>().put(
    `${base}/:api_key_id`,
    {
      schema: {
        tags: [tag],
        summary: 'Update the name, description and/or (inference keys) max_concurrency of an API key',
        params: KeyIdParams,
        body: UpdateKeyBody,
        response: { 200: envelope(KeyRecordSchema) },
      },
      preValidation: async (req) => {
        const body = req.body as Record<string, unknown> | undefined;
        if (body && typeof body === 'object' && !Array.isArray(body)) {
          const other = Object.keys(body).filter((k) => !updatable.includes(k));
          if (other.length > 0)
            throw new AppError('validation_error', msg(inference ? 'key_update_fields_inference' : 'key_update_fields', { fields: other.join(', ') }), other[0]);
          if (!updatable.some((k) => k in body)) throw new AppError('validation_error', msg(inference ? 'key_update_nothing_inference' : 'key_update_nothing'));
        }
      },
    },
    async (req) => ok(req, await service.update(req.user!, req.params.api_key_id, req.body)),
  );
}
