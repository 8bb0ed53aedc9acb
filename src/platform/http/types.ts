import type {} from 'fastify';
import type { UserPrincipal } from '../auth/jwt.js';
import type { KeyPrincipal, OperatorPrincipal } from '../auth/principal.js';

declare module 'fastify' {
  interface FastifyInstance {
    metrics: import('../ops/metrics.js').Metrics;
  }
  interface FastifyRequest {
    /** portal caller (JWT) */
    user?: UserPrincipal;
    /** /v1/admin caller (an operator) */
    operator?: OperatorPrincipal;
    /** {base_url} caller (inference key) */
    apiKey?: KeyPrincipal;
    /** what the request did (model, deployment, tokens, upstream latency...): filled by the services, read by the request log line */
    facts: import('../ops/facts.js').RequestFacts;
    /**
     * what the client secret the request was authenticated with holds (its minting feature's payload), when it was
     * one (routes with `clientSecrets`); the key it was minted from is `apiKey`
     */
    clientSecret?: Record<string, unknown>;
  }
  interface FastifyContextConfig {
    /** the inference-key scope a {base_url} route needs: its feature module's declared scope (FeatureModule.scope) */
    scope?: string;
    /**
     * Who may call the route (default: `key` under {base_url}, `user` under {portal_base_url}):
     * `key` an inference key, `user` a portal user (JWT), `operator` an operator of the installation (the default
     * under /v1/admin), `own` the handler authenticates itself (the query APIs take a Management API Key or a JWT),
     * `none` anyone.
     */
    auth?: 'key' | 'user' | 'operator' | 'own' | 'none';
    /**
     * The route's service reserves each request's worst case itself (src/api/admission.ts: the balance and the
     * TPM window, once it knows the model and the most output): the gate then counts only the request (RPM)
     */
    reserves?: boolean;
    /**
     * A {base_url} route that speaks another vendor's wire: `anthropic-api` (Anthropic's Messages API) answers its errors in Anthropic's shape
     * (./errors.ts, anthropicErrorBody) instead of OpenAI's, and takes the inference key in `x-api-key` as well as
     * in `Authorization: Bearer` (./auth.ts, inferenceKeyToken). No other route reads `x-api-key`.
     */
    wire?: 'anthropic-api';
    /**
     * A WebSocket route browsers open: the inference key may come as the `openai-insecure-api-key.<key>`
     * subprotocol (a browser's WebSocket cannot send headers), and may be a client secret (`ek_...`, minted from a
     * key: src/portal/keys/client-secrets.ts). No other route takes either.
     */
    browserSocket?: boolean;
  }
}
export {};
