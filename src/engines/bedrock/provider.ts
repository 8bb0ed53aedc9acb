import { Type } from 'typebox';
import { defineProvider } from '../provider.js';
import { EngineError } from '../types.js';
import { redactingEngine, upstreamSecrets } from '../shared/redact.js';
import { baseUrlProblem, connectMs } from '../shared/upstream.js';

/** The engine's code, undici's included: loaded at start (`load`), as the other upstream providers' is. */
const textCode = () => import('./index.js');

/** an AWS region's name, e.g. us-east-1, eu-central-2, us-gov-west-1 */
const REGION = /^[a-z]{2}(-[a-z]+)+-\d+$/;

/**
 * The credentials and region of Bedrock, read as the AWS SDKs read them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
 * and AWS_SESSION_TOKEN (temporary credentials); the region from the model file, else AWS_REGION, else
 * AWS_DEFAULT_REGION.
 */
export function awsSettings(s: { name: string; region?: string }, env: Record<string, string | undefined>) {
  const region = s.region ?? (env.AWS_REGION || undefined) ?? (env.AWS_DEFAULT_REGION || undefined);
  const accessKeyId = env.AWS_ACCESS_KEY_ID || undefined;
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY || undefined;
  if (region === undefined) {
    throw new EngineError(`the bedrock model '${s.name}' has no region: set 'region' in its entry, or AWS_REGION`, 'engine_unavailable', 503);
  }
  // the region names the endpoint's host: one from the environment is checked as the model file's is
  if (!REGION.test(region))
    throw new EngineError(`the bedrock model '${s.name}' has the region '${region}', which is not an AWS region's name (e.g. us-east-1)`, 'engine_unavailable', 503);
  // Bedrock answers every unsigned request with a 403: said once here, not on each request
  if (accessKeyId === undefined || secretAccessKey === undefined) {
    throw new EngineError(
      `the bedrock model '${s.name}' has no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)`,
      'engine_unavailable',
      503,
    );
  }
  const sessionToken = env.AWS_SESSION_TOKEN || undefined;
  return { region, credentials: sessionToken ? { accessKeyId, secretAccessKey, sessionToken } : { accessKeyId, secretAccessKey } };
}

/** Amazon Bedrock's Converse API, SigV4-signed (docs/models.md, "bedrock"). */
export const bedrock = defineProvider({
  name: 'bedrock',
  summary: "Amazon Bedrock's Converse API (SigV4, credentials from the AWS environment variables)",
  serves: ['text'],
  probes: ['text'],
  options: Type.Object(
    {
      region: Type.Optional(Type.String({ minLength: 1, description: 'the AWS region, e.g. us-east-1 (default: AWS_REGION, then AWS_DEFAULT_REGION)' })),
      base_url: Type.Optional(Type.String({ minLength: 1, description: 'the runtime endpoint (default https://bedrock-runtime.{region}.amazonaws.com)' })),
      upstream_model: Type.Optional(
        Type.String({ minLength: 1, description: 'the Bedrock model id or inference profile, e.g. anthropic.claude-3-5-haiku-20241022-v1:0 (default: name)' }),
      ),
      max_tokens: Type.Optional(Type.Integer({ minimum: 1, description: 'maxTokens when reasoning is asked without a cap (default 4096; the thinking budget is added)' })),
      context_window: Type.Optional(Type.Integer({ minimum: 16, description: 'tokens' })),
      timeout_ms: Type.Optional(Type.Integer({ minimum: 100, description: 'upstream header wait and longest silence mid-stream' })),
    },
    { additionalProperties: false },
  ),
  // the region is checked here (not by a schema pattern) so the message says what a region looks like
  check: (s) =>
    (s.region !== undefined && !REGION.test(s.region) ? `'region' must be an AWS region's name, e.g. us-east-1 or eu-central-1 (got '${s.region}')` : undefined) ??
    (s.base_url !== undefined ? baseUrlProblem(s.base_url) : undefined),
  remote: true,
  load: { text: textCode },
  create: {
    async text(s, ctx) {
      const { createBedrockEngine, endpointOf } = await textCode();
      const { region, credentials } = awsSettings(s, ctx.env);
      const baseUrl = s.base_url ?? endpointOf(region);
      return redactingEngine(
        createBedrockEngine({ region, credentials, baseUrl, maxTokens: s.max_tokens, contextWindow: s.context_window, timeoutMs: s.timeout_ms, connectTimeoutMs: connectMs(s) }),
        [...upstreamSecrets(baseUrl), credentials.secretAccessKey, ...(credentials.sessionToken ? [credentials.sessionToken] : [])],
      );
    },
  },
});
