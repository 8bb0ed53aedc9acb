import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { envelope, ok } from '../../platform/http/portal-envelope.js';
import type { UserPrincipal } from '../../platform/auth/jwt.js';
import type { ModelRegistry } from '../../models/registry.js';
import type { ModelSpec } from '../../models/config.js';
import type { KeyService } from '../keys/service.js';
import { QUERY_SCOPES } from '../query/routes.js';
import { MeSchema } from './schemas.js';

export interface MeDeps {
  /** the portal's way of recognizing a user (bearer JWT, or the web page's session) */
  authenticate: (req: FastifyRequest) => Promise<UserPrincipal>;
  managementKeys: KeyService;
  inferenceKeys: KeyService;
  models: ModelRegistry;
  adminRole: string;
  /** the voices a model speaks, undefined for a model that does not speak (the audio feature knows; the runtime hands it down) */
  voices?: (model: ModelSpec) => readonly string[] | undefined;
}

/**
 * GET /me: who the caller is and what they may do, for the web page (and any client): the organizations and
 * roles, where they may create organization keys, the active-key limits with what is used of them, the scope
 * values each kind of key understands, and the models with what they do.
 */
export function registerMeRoutes(app: FastifyInstance, deps: MeDeps) {
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/me',
    {
      config: { auth: 'own' },
      schema: {
        tags: ['Account'],
        summary: 'The caller, their organizations, key limits, scope values and models (portal JWT or the web session)',
        security: [{ portalJwt: [] }],
        response: {
          200: envelope(MeSchema),
        },
      },
    },
    async (req) => {
      const user = await deps.authenticate(req);
      const models = deps.models.list().map((m) => {
        const voices = deps.voices?.(m);
        return { id: m.name, type: m.type, ...(voices ? { voices: [...voices] } : {}) };
      });
      const [inference, management] = await Promise.all([deps.inferenceKeys.activeSummary(user), deps.managementKeys.activeSummary(user)]);
      return ok(req, {
        user_id: user.userId,
        org_roles: user.orgRoles,
        admin_orgs: Object.keys(user.orgRoles).filter((o) => user.orgRoles[o] === deps.adminRole),
        // the features' route scopes (what the runtime collected from the modules), then one `model:NAME` per model
        api_keys: { ...inference, scopes: [...deps.inferenceKeys.routeScopes, ...models.map((m) => `model:${m.id}`)] },
        management_api_keys: { ...management, scopes: Object.values(QUERY_SCOPES) },
        models,
      });
    },
  );
}
