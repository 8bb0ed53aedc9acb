import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { BudgetListSchema } from '../schemas.js';
import type { AdminContext } from '../context.js';

/** GET /v1/admin/budgets: every budget, with what is spent in its current period and when it resets. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/budgets',
    {
      schema: {
        tags: ['Admin'],
        summary: 'The budgets of keys, users and organizations: limit, soft limit, spent this period, reset time',
        response: { 200: envelope(BudgetListSchema) },
      },
    },
    async (req) => ok(req, await service.budgetList()),
  );
}
