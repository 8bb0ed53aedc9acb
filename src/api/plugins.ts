import type { FastifyInstance } from 'fastify';
import type { Services } from '../app.js';
import { responsesPlugin } from '../responses/plugin.js';
import { audioPlugin } from '../audio/plugin.js';

/**
 * The feature modules mounted under {base_url} besides /models: each adds its routes to the /v1 scope
 * (which already authenticates inference keys and renders errors in the OpenAI shape).
 */
export const apiPlugins: Array<(app: FastifyInstance, services: Services) => Promise<void> | void> = [responsesPlugin, audioPlugin];
