import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import { BudgetBody, BudgetSchema } from '../schemas.js';
import { actorOf, type AdminContext } from '../context.js';

/** POST /v1/admin/budgets: sets the budget of a key, user or organization for a period (made or replaced); audited. */
export default function (app: FastifyInstance, { service }: AdminContext) {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/budgets',
    {
      schema: {
        tags: ['Admin'],
        summary: 'Set a budget: a limit per day, week or month (UTC) past which requests are refused, and a soft limit that warns',
        body: BudgetBody,
        response: { 200: envelope(BudgetSchema) },
      },
    },
    async (req) => ok(req, await service.budgetSet(actorOf(req), req.body)),
  );
}
