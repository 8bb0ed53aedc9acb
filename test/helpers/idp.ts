import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

export interface TestIdp {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** org roles the IdP puts in the ID token of a user (claim org_roles) */
  roles: Record<string, Record<string, string>>;
  close(): Promise<void>;
}

/** A free port on 127.0.0.1 (for a server whose own address must be known before it starts). */
export async function freePort(): Promise<number> {
  const s = http.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * A real OpenID provider (the oidc-provider package) on 127.0.0.1 for the sign-in tests: authorization code with
 * PKCE required, a confidential client, its development login form (any login name, any password: the login name
 * becomes `sub`), and the org roles of each user in the ID token.
 */
export async function startIdp(redirectUri: string): Promise<TestIdp> {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  const clientId = 'portico';
  const clientSecret = 'portico-test-client-secret-0123456789';
  const roles: Record<string, Record<string, string>> = {};
  const provider = new Provider(issuer, {
    clients: [{ client_id: clientId, client_secret: clientSecret, redirect_uris: [redirectUri], response_types: ['code'], grant_types: ['authorization_code'] }],
    findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub, org_roles: roles[sub] ?? {} }) }),
    claims: { openid: ['sub', 'org_roles'] },
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    cookies: { keys: ['test-idp-cookie-key-0123456789'] },
    features: { devInteractions: { enabled: true } },
    ttl: { Interaction: 600, Session: 3600, Grant: 3600, AuthorizationCode: 60, IdToken: 3600, AccessToken: 3600 },
  });
  provider.on('server_error', () => {});
  const server = http.createServer(provider.callback());
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    issuer,
    clientId,
    clientSecret,
    roles,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
