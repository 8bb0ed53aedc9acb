import type { FastifyInstance } from 'fastify';
import type { Services } from '../app.js';
import create from './routes/create.js';
import companions from './routes/companions.js';

/** Mounts the Responses API under {base_url}. */
export function responsesPlugin(app: FastifyInstance, services: Services) {
  create(app, services.responses);
  companions(app, services.responses);
}
