import type { FastifyInstance } from 'fastify';

/**
 * Where a module's routes are mounted. The composition root gives each group its Fastify scope:
 * - `api`: under {base_url} (/v1): OpenAI error shape; routes authenticate an inference key unless their
 *   config says otherwise (`auth`).
 * - `portal`: under {portal_base_url} (/v1/portal): the portal's error envelope; routes authenticate a portal
 *   user (JWT) unless their config says otherwise.
 * - `admin`: under /v1/admin: the portal's error envelope; routes authenticate an operator of the installation (an
 *   operator's JWT or session, or a Management API Key with the operator scope) unless their config says otherwise.
 * - `root`: at /, no authentication of its own (operations, documents, the web page).
 */
export type RouteGroup = 'root' | 'portal' | 'admin' | 'api';

export type RouteRegistrar = (app: FastifyInstance) => void | Promise<void>;

/**
 * A unit a feature meters besides tokens (which every text and embeddings model is priced in): the name of its
 * count in what a request used (`Metered.units`), and the model-file pricing key that prices one of it, in
 * credits (`pricing.<price>` of the model that served).
 */
export interface MeteredUnit {
  /** e.g. `characters`, `audio_seconds` */
  readonly unit: string;
  /** `per_` and a name: `per_character`, `per_audio_second` */
  readonly price: `per_${string}`;
  /** the model types it is charged on: a price on a model of another type would never charge anything */
  readonly on: readonly string[];
}

/**
 * What a feature tells the layers below it, as data: the runtime collects the declarations of every module
 * (src/compose/declarations.ts) and hands the lists down (the keys' scope vocabulary, the usage operations, the
 * priced units). Lower layers never name a feature (test/architecture.test.ts).
 */
export interface FeatureDeclaration {
  /**
   * The inference-key scope its {base_url} routes need (their `config.scope`): a key that names endpoint scopes
   * calls only those families. The keys accept it, the web page offers it, in the order of the modules.
   */
  readonly scope?: string;
  /** the `operation` of the usage records it writes (the ledger stores them as they are) */
  readonly operations?: readonly string[];
  /** the units it charges besides tokens, and their pricing keys */
  readonly units?: readonly MeteredUnit[];
}

/**
 * A feature (portal keys, query, responses, audio, ...): built by its own factory from the dependencies it
 * is given, it answers its routes and stops its own work. It never imports the composition root.
 */
export interface FeatureModule extends FeatureDeclaration {
  readonly name: string;
  readonly routes: Partial<Record<RouteGroup, RouteRegistrar>>;
  /** stops what the module runs; running work gets `graceMs` to finish */
  close?(graceMs: number): Promise<void>;
}
