import { Type } from 'typebox';

/**
 * The web session routes' answers. Kept apart from the routes (this file imports only TypeBox) so the page
 * (web/src/api.ts) types its calls from them with a type-only import, as it does for the portal's schemas.
 */

/** A session as the portal routes answer it. */
export const SessionSchema = Type.Object({
  user_id: Type.String(),
  org_roles: Type.Record(Type.String(), Type.String()),
  method: Type.Union([Type.Literal('link'), Type.Literal('oidc')]),
  created_at: Type.Integer(),
  expires_at: Type.Integer(),
  csrf_token: Type.String({ description: 'send it as x-csrf-token on every state-changing portal request made with the session cookie' }),
});

/** GET /session/methods: how a person can sign in */
export const SignInMethodsSchema = Type.Object({ link: Type.Boolean(), oidc: Type.Boolean(), oidc_login_url: Type.Union([Type.String(), Type.Null()]) });
