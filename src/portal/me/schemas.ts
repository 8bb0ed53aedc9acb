import { Type } from 'typebox';

/** One kind of key (inference or management) as GET /me describes it. */
export const KindSummarySchema = Type.Object({
  limit: Type.Integer({ description: 'at most this many active keys per user in one organization' }),
  active: Type.Record(Type.String(), Type.Integer(), { description: 'org id -> active keys that count under the limit (expired ones do not)' }),
  scopes: Type.Array(Type.String(), { description: 'the scope values this kind of key understands' }),
});

/** GET /me: the caller, their organizations, key limits, scope values and models (the web page types it from here). */
export const MeSchema = Type.Object({
  user_id: Type.String(),
  org_roles: Type.Record(Type.String(), Type.String()),
  admin_orgs: Type.Array(Type.String(), { description: 'organizations where the caller may create organization-level keys' }),
  api_keys: KindSummarySchema,
  management_api_keys: KindSummarySchema,
  models: Type.Array(
    Type.Object({
      id: Type.String(),
      type: Type.String({ description: 'text, speech, transcription, embeddings or realtime' }),
      voices: Type.Optional(Type.Array(Type.String(), { description: 'speech models: the voices it speaks (the `voice` of /audio/speech)' })),
    }),
  ),
});
