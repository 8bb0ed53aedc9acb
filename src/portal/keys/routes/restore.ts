import type { FastifyInstance } from 'fastify';
import { registerStateChange } from './state-change.js';
import type { KeyRoutesDeps } from './deps.js';

export default function (app: FastifyInstance, deps: KeyRoutesDeps) {
  registerStateChange(app, deps, 'restore', 'Restore a revoked API key (within the active limit)', (u, id) => deps.service.restore(u, id));
}
