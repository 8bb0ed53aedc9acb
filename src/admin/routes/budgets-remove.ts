import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { BudgetSchema } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** DELETE /v1/admin/budgets/{budget_id}: removes a budget; audited. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().delete(
    '/budgets/:budget_id',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Remove a budget',
        params: Type.Object({ budget_id: Type.String({ minLength: 1, maxLength: 100 }) }, { additionalProperties: false }),
        response: { 200: envelope(BudgetSchema) },
      },
    },
    async (req) => ok(req, await service.budgetRemove(actorOf(req), req.params.budget_id)),
  );
}
