import { Type } from 'typebox';
import { PortalErrorSchema } from './portal-envelope.js';

/** The OpenAI error object every {base_url} route (and the root) answers on failure. */
export const OpenAIErrorSchema = Type.Object(
  {
    error: Type.Object({
      message: Type.String(),
      type: Type.String({ description: 'invalid_request_error, authentication_error, permission_error, server_error, ...' }),
      param: Type.Union([Type.String(), Type.Null()]),
      code: Type.Union([Type.String(), Type.Null()], { description: 'the error code (docs/api.md, "Error codes" and "Validation")' }),
    }),
  },
  { description: 'An error, in the OpenAI shape' },
);

/** Response schemas to merge into a route of a group: its error shape for every 4xx and 5xx. */
export function errorResponses(group: 'portal' | 'openai') {
  const s = group === 'portal' ? PortalErrorSchema : OpenAIErrorSchema;
  return { '4XX': s, '5XX': s };
}
