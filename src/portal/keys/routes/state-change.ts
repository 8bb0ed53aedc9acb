import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { AppError } from '../../../platform/errors.js';
import { envelope, ok } from '../../../platform/http/portal-envelope.js';
import type { UserPrincipal } from '../../../platform/auth/jwt.js';
import { KeyIdBody, KeyRecordSchema } from '../schemas.js';
import type { KeyRecord } from '../service.js';
import type { KeyRoutesDeps } from './deps.js';

/** POST {base}/revoke and {base}/restore: body {api_key_id}; a missing id is the spec's `api_key_id is required`. */
export function registerStateChange(
  app: FastifyInstance,
  { base, tag }: KeyRoutesDeps,
  action: 'revoke' | 'restore',
  summary: string,
  run: (user: UserPrincipal, id: string) => Promise<KeyRecord>,
) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    `${base}/${action}`,
    {
      schema: { tags: [tag], summary, body: KeyIdBody, response: { 200: envelope(KeyRecordSchema) } },
      preValidation: async (req: FastifyRequest) => {
        const body = req.body as Record<string, unknown> | undefined | null;
        const id = body && typeof body === 'object' ? body.api_key_id : undefined;
        if (id === undefined || id === null || id === '') throw new AppError('api_key_id_required', undefined, 'api_key_id');
      },
    },
    async (req) => ok(req, await run(req.user!, req.body.api_key_id)),
  );
}
