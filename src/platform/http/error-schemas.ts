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

/** Anthropic's error object, answered by the {base_url} routes that speak Anthropic's wire (`config.wire: 'anthropic-api'`). */
export const AnthropicErrorSchema = Type.Object(
  {
    type: Type.Literal('error'),
    error: Type.Object({
      type: Type.String({ description: 'invalid_request_error, authentication_error, permission_error, not_found_error, rate_limit_error, api_error, overloaded_error, ...' }),
      message: Type.String(),
    }),
    request_id: Type.String(),
  },
  { description: "An error, in Anthropic's shape" },
);

/** Response schemas to merge into a route of a group: its error shape for every 4xx and 5xx. */
export function errorResponses(group: 'portal' | 'openai' | 'anthropic') {
  const s = group === 'portal' ? PortalErrorSchema : group === 'anthropic' ? AnthropicErrorSchema : OpenAIErrorSchema;
  return { '4XX': s, '5XX': s };
}
