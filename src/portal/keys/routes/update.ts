import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { AppError, msg } from '../../../platform/errors.js';
import { ok } from '../../../platform/http/errors.js';
import { KeyIdParams, KeyRecordSchema, UpdateKeyBody, envelope } from '../schemas.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, { service, base, tag }: KeyRoutesDeps) {
  app.withTypeProvider<TypeBoxTypeProvider>().put(
    `${base}/:api_key_id`,
    {
      schema: {
        tags: [tag],
        summary: 'Update the name and/or description of an API key',
        params: KeyIdParams,
        body: UpdateKeyBody,
        response: { 200: envelope(KeyRecordSchema) },
      },
      preValidation: async (req) => {
        const body = req.body as Record<string, unknown> | undefined;
        if (body && typeof body === 'object' && !Array.isArray(body)) {
          const other = Object.keys(body).filter((k) => k !== 'name' && k !== 'description');
          if (other.length > 0) throw new AppError('validation_error', msg('key_update_fields', { fields: other.join(', ') }), other[0]);
          if (!('name' in body) && !('description' in body)) throw new AppError('validation_error', msg('key_update_nothing'));
        }
      },
    },
    async (req) => ok(req, await service.update(req.user!, req.params.api_key_id, req.body)),
  );
}
