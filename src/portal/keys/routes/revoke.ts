import type { FastifyInstance } from 'fastify';
import { registerStateChange } from './state-change.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, deps: KeyRoutesDeps) {
  registerStateChange(app, deps, 'revoke', "Revoke one of the caller's API keys", (u, id) => deps.service.revoke(u, id));
}
