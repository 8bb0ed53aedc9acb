import { createHmac } from 'node:crypto';
import type * as client from 'openid-client';
import { EncryptJWT, jwtDecrypt } from 'jose';
import type { OperatorClaim, WebConfig } from '../platform/config.js';
import { operatorFromClaims, orgRolesFromClaims, subjectProblem, type UserPrincipal } from '../platform/auth/jwt.js';

/** What the browser keeps between the redirect to the identity provider and its return (sealed in a cookie). */
interface Transaction {
  state: string;
  nonce: string;
  verifier: string;
}

const TRANSACTION_TTL_S = 600;

/** openid-client (~8 MiB) is loaded on the first sign-in, not by every start */
const openid = () => import('openid-client');

export class OidcError extends Error {}

/**
 * OpenID Connect sign-in, authorization code flow with PKCE (S256), state and nonce, through openid-client.
 * The provider's metadata comes from its discovery document (fetched on first use and kept; a failure is retried
 * at the next sign-in, so Portico starts while the provider is away). openid-client checks the ID token: signature
 * against the provider's JWKS, issuer, audience, expiry, nonce. The user is its `sub`; the org-roles claim
 * (JWT_ORG_ROLES_CLAIM) maps organizations to roles as it does for portal JWTs.
 *
 * The transaction (state, nonce, PKCE verifier) travels in an encrypted, HttpOnly cookie (A256GCM under a key
 * derived from KEY_PEPPER) limited to /auth/oidc and 10 minutes, so any instance can finish a sign-in another began.
 */
export class OidcSignIn {
  private configuration?: Promise<client.Configuration>;
  private readonly sealKey: Uint8Array;

  constructor(
    private readonly cfg: NonNullable<WebConfig['oidc']>,
    private readonly orgRolesClaim: string,
    pepper: Buffer,
    /** PORTICO_OPERATOR_CLAIM: the ID token's claim that makes its user an operator */
    private readonly operatorClaim?: OperatorClaim,
  ) {
    this.sealKey = createHmac('sha256', pepper).update('portico/web/oidc-transaction/v1').digest();
  }

  private config(): Promise<client.Configuration> {
    this.configuration ??= (async () => {
      const client = await openid();
      const issuer = new URL(this.cfg.issuer);
      // plain http is accepted only for a provider on this machine (the configuration refuses it elsewhere)
      const insecure = issuer.protocol === 'http:';
      const auth = this.cfg.clientSecret ? client.ClientSecretBasic(this.cfg.clientSecret) : client.None();
      return client.discovery(issuer, this.cfg.clientId, this.cfg.clientSecret, auth, {
        execute: insecure ? [client.allowInsecureRequests] : [],
        timeout: 10,
      });
    })();
    this.configuration.catch(() => {
      this.configuration = undefined;
    });
    return this.configuration;
  }

  /** The provider's authorization URL to send the browser to, and the sealed transaction for its cookie. */
  async start(): Promise<{ url: string; sealed: string }> {
    let config: client.Configuration;
    try {
      config = await this.config();
    } catch (e) {
      throw new OidcError(`the identity provider's discovery document could not be read: ${(e as Error).message}`);
    }
    const client = await openid();
    const tx: Transaction = { state: client.randomState(), nonce: client.randomNonce(), verifier: client.randomPKCECodeVerifier() };
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.cfg.redirectUrl,
      scope: this.cfg.scopes,
      response_type: 'code',
      code_challenge: await client.calculatePKCECodeChallenge(tx.verifier),
      code_challenge_method: 'S256',
      state: tx.state,
      nonce: tx.nonce,
    });
    const sealed = await new EncryptJWT({ ...tx })
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM' })
      .setIssuedAt()
      .setExpirationTime(`${TRANSACTION_TTL_S}s`)
      .encrypt(this.sealKey);
    return { url: url.href, sealed };
  }

  /**
   * Finishes a sign-in: `query` is the callback's query string, `sealed` the transaction cookie. Exchanges the code
   * (with the PKCE verifier) and returns the user of the verified ID token.
   */
  async finish(query: string, sealed: string | undefined): Promise<UserPrincipal> {
    if (!sealed) throw new OidcError('no sign-in is under way in this browser (the transaction cookie is missing or expired)');
    let tx: Transaction;
    try {
      const { payload } = await jwtDecrypt(sealed, this.sealKey, { keyManagementAlgorithms: ['dir'], contentEncryptionAlgorithms: ['A256GCM'] });
      tx = payload as unknown as Transaction;
    } catch {
      throw new OidcError('the sign-in transaction cookie is invalid or expired');
    }
    const current = new URL(this.cfg.redirectUrl);
    current.search = query;
    const config = await this.config();
    const client = await openid();
    try {
      const tokens = await client.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: tx.verifier,
        expectedState: tx.state,
        expectedNonce: tx.nonce,
        idTokenExpected: true,
      });
      const claims = tokens.claims();
      const sub = claims?.sub;
      const problem = subjectProblem(sub);
      if (problem) throw new OidcError(`the ID token is refused: ${problem.en}`);
      const all = claims as Record<string, unknown>;
      return {
        userId: sub as string,
        orgRoles: orgRolesFromClaims(all, this.orgRolesClaim),
        ...(operatorFromClaims(all, this.operatorClaim) ? { operator: true as const } : {}),
      };
    } catch (e) {
      if (e instanceof OidcError) throw e;
      const err = e as { error?: string; error_description?: string; message?: string };
      throw new OidcError(err.error ? `${err.error}${err.error_description ? ': ' + err.error_description : ''}` : (err.message ?? String(e)));
    }
  }
}
