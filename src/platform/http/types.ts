import type {} from 'fastify';
import type { UserPrincipal } from '../auth/jwt.js';
import type { KeyPrincipal } from '../../portal/keys/verifier.js';

declare module 'fastify' {
  interface FastifyInstance {
    metrics: import('../ops/metrics.js').Metrics;
  }
  interface FastifyRequest {
    /** portal caller (JWT) */
    user?: UserPrincipal;
    /** {base_url} caller (inference key) */
    apiKey?: KeyPrincipal;
  }
  interface FastifyContextConfig {
    /** the inference-key scope a {base_url} route needs (responses, audio, models) */
    scope?: string;
    /** false: the route needs no authentication */
    public?: boolean;
  }
}
export {};
