/**
 * A scripted server that speaks Amazon Bedrock's Converse API, for the bedrock provider's tests: node:http on
 * 127.0.0.1, port 0. Its answers are typed with the official client's types (@aws-sdk/client-bedrock-runtime:
 * ConverseResponse, the ConverseStreamOutput events), its stream is AWS's binary event-stream framing, and every
 * request's SigV4 signature is checked with the secret key (recomputed from the request as it arrived: a request
 * whose Authorization does not match is refused with a 403, as AWS refuses it). The official BedrockRuntimeClient
 * reads it (test/engines/bedrock.test.ts): the mock speaks the real wire.
 *
 *   const up = await startBedrockMock({ credentials: { accessKeyId, secretAccessKey }, region: 'us-east-1' });
 *   up.script({ text: 'Hello', chunks: 2, usage: { inputTokens: 10, outputTokens: 2 } });
 *   up.requests[0].body / .headers / .modelId / .stream
 *
 * Failure scripts: an error status with AWS's error header and body, an exception message mid-stream, a frame with
 * a bad CRC, a hang before the headers or after N events, a break after N events, garbage, a reset.
 */
import type http from 'node:http';
import { createHash } from 'node:crypto';
import type { ConverseResponse, ConverseStreamOutput, TokenUsage, StopReason } from '@aws-sdk/client-bedrock-runtime';
import { encodeMessage } from '../../src/engines/bedrock/eventstream.js';
import { signature, type AwsCredentials } from '../../src/engines/bedrock/sigv4.js';
import { opening, sendJson, split, startRecordingMock, writeFrames, type MockRequest, type RecordingMock, type ScriptedFailures } from './recording-mock.js';

export interface BedrockToolUse {
  toolUseId?: string;
  name: string;
  /** the input: an object (streamed as one piece), or the pieces of its JSON text */
  input: Record<string, unknown> | string[];
}

export interface BedrockReply extends ScriptedFailures {
  text?: string | string[];
  /** pieces a string text / reasoning is split into (default 1) */
  chunks?: number;
  /** reasoning streamed before the text (a reasoningContent block with a signature) */
  reasoning?: string | string[];
  toolUses?: BedrockToolUse[];
  /** default: tool_use with toolUses, else end_turn; null: no messageStop */
  stopReason?: StopReason | null;
  usage?: Partial<TokenUsage>;
  /** an exception message after this many events (`:exception-type`) */
  exceptionAfter?: number;
  exceptionType?: string;
  /** this event's frame (0-based) is sent with a bad message CRC */
  corruptAt?: number;
  /** with `status`: the x-amzn-errortype (default: the status's), the body {message: errorMessage} */
  errorType?: string;
  /** written verbatim as a 200 body of this content type */
  raw?: Buffer | string;
  rawType?: string;
}

export interface BedrockRequest extends MockRequest {
  /** the path with its query, as it came */
  path: string;
  modelId: string;
  stream: boolean;
  /** the body parsed as JSON (undefined when it is no JSON) */
  body: any;
  /** the signature checked out */
  signed: boolean;
}

/** url: the runtime endpoint, the model file's base_url */
export type BedrockMock = RecordingMock<BedrockRequest, BedrockReply>;

const ERROR_TYPES: Record<number, string> = {
  400: 'ValidationException',
  403: 'AccessDeniedException',
  404: 'ResourceNotFoundException',
  408: 'ModelTimeoutException',
  424: 'ModelErrorException',
  429: 'ThrottlingException',
  500: 'InternalServerException',
  503: 'ServiceUnavailableException',
};

function stopOf(r: BedrockReply): StopReason | null {
  return r.stopReason !== undefined ? r.stopReason : r.toolUses?.length ? 'tool_use' : 'end_turn';
}

function usageOf(r: BedrockReply): TokenUsage {
  const u = r.usage ?? {};
  const input = u.inputTokens ?? 5;
  const output = u.outputTokens ?? 3;
  const out: TokenUsage = {
    inputTokens: input,
    outputTokens: output,
    totalTokens: u.totalTokens ?? input + output + (u.cacheReadInputTokens ?? 0) + (u.cacheWriteInputTokens ?? 0),
  };
  if (u.cacheReadInputTokens !== undefined) out.cacheReadInputTokens = u.cacheReadInputTokens;
  if (u.cacheWriteInputTokens !== undefined) out.cacheWriteInputTokens = u.cacheWriteInputTokens;
  if (u.cacheDetails !== undefined) out.cacheDetails = u.cacheDetails;
  return out;
}

function inputText(t: BedrockToolUse): string[] {
  return Array.isArray(t.input) ? t.input : [JSON.stringify(t.input)];
}

/** a whole ConverseResponse */
function converseResponse(r: BedrockReply): ConverseResponse {
  const content: any[] = [];
  const reasoning = split(r.reasoning, 1).join('');
  if (reasoning) content.push({ reasoningContent: { reasoningText: { text: reasoning, signature: 'sig' } } });
  const text = split(r.text, 1).join('');
  if (text) content.push({ text });
  r.toolUses?.forEach((t, i) => content.push({ toolUse: { toolUseId: t.toolUseId ?? `tooluse_${i}`, name: t.name, input: JSON.parse(inputText(t).join('') || '{}') } }));
  return { output: { message: { role: 'assistant', content } }, stopReason: stopOf(r) ?? 'end_turn', usage: usageOf(r), metrics: { latencyMs: 12 } } as ConverseResponse;
}

/** the stream's events, as ConverseStreamOutput members: [event type, payload] */
function streamEvents(r: BedrockReply): Array<[string, Record<string, unknown>]> {
  const n = r.chunks ?? 1;
  const evs: Array<[keyof ConverseStreamOutput & string, Record<string, unknown>]> = [['messageStart', { role: 'assistant' }]];
  let index = 0;
  const reasoning = split(r.reasoning, n);
  if (reasoning.length) {
    for (const t of reasoning) evs.push(['contentBlockDelta', { contentBlockIndex: index, delta: { reasoningContent: { text: t } } }]);
    evs.push(['contentBlockDelta', { contentBlockIndex: index, delta: { reasoningContent: { signature: 'sig' } } }]);
    evs.push(['contentBlockStop', { contentBlockIndex: index++ }]);
  }
  const text = split(r.text, n);
  if (text.length) {
    for (const t of text) evs.push(['contentBlockDelta', { contentBlockIndex: index, delta: { text: t } }]);
    evs.push(['contentBlockStop', { contentBlockIndex: index++ }]);
  }
  r.toolUses?.forEach((t, i) => {
    evs.push(['contentBlockStart', { contentBlockIndex: index, start: { toolUse: { toolUseId: t.toolUseId ?? `tooluse_${i}`, name: t.name } } }]);
    for (const piece of inputText(t)) evs.push(['contentBlockDelta', { contentBlockIndex: index, delta: { toolUse: { input: piece } } }]);
    evs.push(['contentBlockStop', { contentBlockIndex: index++ }]);
  });
  const stop = stopOf(r);
  if (stop !== null) evs.push(['messageStop', { stopReason: stop }]);
  evs.push(['metadata', { usage: usageOf(r), metrics: { latencyMs: 12 } }]);
  return evs;
}

/** one event's frame, with the `p` padding field AWS adds to each payload */
export function eventFrame(type: string, payload: Record<string, unknown>): Buffer {
  return encodeMessage({ ':event-type': type, ':content-type': 'application/json', ':message-type': 'event' }, JSON.stringify({ ...payload, p: 'abcdefgh' }));
}

/** Recomputes the request's SigV4 signature from what arrived: true when its Authorization header is right. */
function verify(req: http.IncomingMessage, body: Buffer, creds: AwsCredentials, region: string): boolean {
  const auth = String(req.headers.authorization ?? '');
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m || m[1] !== creds.accessKeyId || m[3] !== region || m[4] !== 'bedrock') return false;
  const amz = String(req.headers['x-amz-date'] ?? '');
  if (amz.slice(0, 8) !== m[2]) return false;
  if (creds.sessionToken !== undefined && req.headers['x-amz-security-token'] !== creds.sessionToken) return false;
  const signedHeaders = m[5]!.split(';');
  if (!signedHeaders.includes('host') || !signedHeaders.includes('x-amz-date')) return false;
  const headers: Record<string, string> = {};
  for (const h of signedHeaders) headers[h] = String(req.headers[h] ?? '');
  // the body as it arrived must be the one signed
  const hash = createHash('sha256').update(body).digest('hex');
  if (headers['x-amz-content-sha256'] !== undefined && headers['x-amz-content-sha256'] !== hash) return false;
  const sig = signature({ method: req.method!, host: headers.host!, path: req.url!, headers, body, region, service: 'bedrock', credentials: creds, amzDate: amz, signedHeaders });
  return sig === m[6];
}

export async function startBedrockMock(opts: { credentials: AwsCredentials; region: string; defaultReply?: BedrockReply }): Promise<BedrockMock> {
  const json = sendJson;
  // no model id: a path that is no Converse route
  return startRecordingMock<BedrockRequest, BedrockReply>({
    defaultReply: opts.defaultReply ?? { text: 'Hello from Bedrock' },
    describe(head, req, raw) {
      const m = /^\/model\/([^/]+)\/(converse|converse-stream)$/.exec(req.url ?? '');
      return {
        path: req.url!,
        modelId: m ? decodeURIComponent(m[1]!) : '',
        stream: m?.[2] === 'converse-stream',
        // garbage is no body here (the text is in `raw`)
        body: head.body === head.raw ? undefined : head.body,
        signed: verify(req, raw, opts.credentials, opts.region),
      };
    },
    async answer(rec, req, res, replies) {
      if (req.method !== 'POST' || !rec.modelId) return json(res, 404, { message: 'Not Found' }, { 'x-amzn-errortype': 'UnknownOperationException' });
      if (!rec.signed) {
        return json(res, 403, { message: 'The request signature we calculated does not match the signature you provided.' }, { 'x-amzn-errortype': 'InvalidSignatureException' });
      }
      if (rec.body === undefined || !Array.isArray(rec.body.messages)) return json(res, 400, { message: 'Malformed input request' }, { 'x-amzn-errortype': 'ValidationException' });

      const r = replies.next();
      if (await opening(r, req)) return;
      if (r.status !== undefined) {
        const type = r.errorType ?? ERROR_TYPES[r.status] ?? 'InternalServerException';
        return json(res, r.status, { message: r.errorMessage ?? type }, { 'x-amzn-errortype': `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/`, ...r.headers });
      }
      if (r.raw !== undefined) {
        res.writeHead(200, { 'content-type': r.rawType ?? 'application/vnd.amazon.eventstream' });
        return res.end(r.raw);
      }
      if (!rec.stream) return json(res, 200, converseResponse(r), r.headers);

      res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', 'x-amzn-requestid': 'req-1', ...r.headers });
      const frames = streamEvents(r).map(([type, payload], i) => {
        const frame = eventFrame(type, payload);
        if (r.corruptAt === i) frame.writeUInt32BE((frame.readUInt32BE(frame.length - 4) + 1) >>> 0, frame.length - 4);
        return frame;
      });
      const failure = () =>
        encodeMessage(
          { ':exception-type': r.exceptionType ?? 'throttlingException', ':content-type': 'application/json', ':message-type': 'exception' },
          JSON.stringify({ message: 'Too many requests, please wait before trying again.' }),
        );
      // each frame on the wire before the next step (a break then cuts after it, not before the headers)
      if (await writeFrames(res, frames, r, { failAt: r.exceptionAfter, failure, drain: true })) res.end();
    },
  });
}
