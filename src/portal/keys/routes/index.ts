import type { FastifyInstance } from 'fastify';
import type { KeyRoutesDeps } from './deps.js';
import create from './create.js';
import list from './list.js';
import update from './update.js';
import del from './delete.js';
import revoke from './revoke.js';
import restore from './restore.js';

/** The six key operations of spec 4.1 for one kind of key. */
export function registerKeyRoutes(app: FastifyInstance, deps: KeyRoutesDeps) {
  for (const r of [create, list, update, del, revoke, restore]) r(app, deps);
}

export type { KeyRoutesDeps } from './deps.js';
