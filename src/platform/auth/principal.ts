import type { KeyKind } from './api-key-format.js';

/** What a verified API key lets a request know about its caller (built by the key verifier of the portal). */
export interface KeyPrincipal {
  keyId: string;
  kind: KeyKind;
  userId: string;
  orgId: string;
  scopes: string[];
  rpmLimit: number | null;
  tpmLimit: number | null;
  /** requests and open WebSockets at once on one instance (null = KEY_MAX_CONCURRENCY, 0 = unlimited) */
  maxConcurrency: number | null;
}

/** Who calls an operator route (/v1/admin): an operator, by their token or session, or by their Management API Key. */
export interface OperatorPrincipal {
  userId: string;
  /** the Management API Key used (its id), when the call was made with one */
  keyId?: string;
}
