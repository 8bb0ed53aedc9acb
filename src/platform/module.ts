import type { FastifyInstance } from 'fastify';

/**
 * Where a module's routes are mounted. The composition root gives each group its Fastify scope:
 * - `api`: under {base_url} (/v1): OpenAI error shape; routes authenticate an inference key unless their
 *   config says otherwise (`auth`).
 * - `portal`: under {portal_base_url} (/v1/portal): the portal's error envelope; routes authenticate a portal
 *   user (JWT) unless their config says otherwise.
 * - `root`: at /, no authentication of its own (operations, documents, the web page).
 */
export type RouteGroup = 'root' | 'portal' | 'api';

export type RouteRegistrar = (app: FastifyInstance) => void | Promise<void>;

/**
 * A feature (portal keys, query, responses, audio, ...): built by its own factory from the dependencies it
 * is given, it answers its routes and stops its own work. It never imports the composition root.
 */
export interface FeatureModule {
  readonly name: string;
  readonly routes: Partial<Record<RouteGroup, RouteRegistrar>>;
  /** stops what the module runs; running work gets `graceMs` to finish */
  close?(graceMs: number): Promise<void>;
}
