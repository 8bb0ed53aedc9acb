/**
 * The `bedrock` text engine: an HTTP client of Amazon Bedrock's Converse API (POST
 * {endpoint}/model/{modelId}/converse, and /converse-stream), spoken natively: its request shape (request.ts), its
 * answers (decoder.ts) in JSON or in AWS's binary event stream (eventstream.ts), its AWS Signature Version 4 on
 * every request (sigv4.ts, the signing hook of the shared transport) and its errors (BedrockUpstream below). The
 * transport is the one every upstream provider shares (engines/shared/http.ts): keep-alive pool, timeouts at
 * connect, before the first byte and between two chunks, cancel on abort.
 */
import { EngineError, type GenerateEvent, type GenerateRequest, type TextEngine } from '../types.js';
import { jsonBody, Upstream, parseErrorBody, type Call } from '../shared/http.js';
import { whole } from '../shared/answer.js';
import { estimateTokensInTurns } from '../shared/tokens.js';
import { buildConverseBody } from './request.js';
import { ConverseDecoder, streamException } from './decoder.js';
import { EventStreamDecoder, FrameError } from './eventstream.js';
import { signRequest, type AwsCredentials } from './sigv4.js';

export const DEFAULT_MAX_TOKENS = 4096;
/** the service name Bedrock's runtime is signed for (the SDK's signingName) */
export const SIGNING_SERVICE = 'bedrock';

export const endpointOf = (region: string) => `https://bedrock-runtime.${region}.amazonaws.com`;

export interface BedrockEngineOptions {
  region: string;
  credentials: AwsCredentials;
  /** the runtime endpoint (default https://bedrock-runtime.{region}.amazonaws.com) */
  baseUrl?: string;
  /** maxTokens when reasoning is asked without a cap (the thinking budget is added) */
  maxTokens?: number;
  contextWindow?: number;
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** the signing time, for tests (default: now) */
  now?: () => Date;
}

/**
 * Bedrock's errors (the `x-amzn-errortype` header and a `{message}` body) on top of the shared mapping: 424
 * ModelErrorException (the model failed on this input) and 503 ServiceUnavailableException are retryable 502s,
 * a too-long prompt (ValidationException) the context-length refusal it is. 403 AccessDenied stays an operator's
 * problem (502), 429 ThrottlingException keeps its retry-after, 408 ModelTimeoutException is a 504.
 */
export class BedrockUpstream extends Upstream {
  override statusError(status: number, body: string, retryAfter?: string | string[]): EngineError {
    if (status === 400) {
      const msg = this.redact(awsMessage(body)).slice(0, 2000);
      if (/too long|context window|too many (input )?tokens/i.test(msg)) return new EngineError(msg, 'context_length_exceeded', 400, { upstreamStatus: status });
      return new EngineError(msg || 'HTTP 400', 'invalid_request', 400, { upstreamStatus: status });
    }
    if (status === 424) {
      return new EngineError(`upstream model error: ${this.redact(awsMessage(body)).slice(0, 2000)}`, 'upstream_error', 502, { retryable: true, upstreamStatus: status });
    }
    return super.statusError(status, body, retryAfter);
  }
}

/** AWS's JSON error body: `message` (or `Message`) */
function awsMessage(body: string): string {
  try {
    const j = JSON.parse(body);
    if (typeof j?.message === 'string') return j.message;
    if (typeof j?.Message === 'string') return j.Message;
  } catch {
    // not JSON: the shared reading below
  }
  return parseErrorBody(body).message;
}

const EVENT_STREAM = /application\/vnd\.amazon\.eventstream/i;

/** ConverseStream's body, read as it arrives: AWS event-stream messages into the decoder, its events out. */
async function* readEventStream(up: Upstream, call: Call, decoder: ConverseDecoder): AsyncGenerator<GenerateEvent> {
  const res = call.res!;
  if (!EVENT_STREAM.test(String(call.headers['content-type'] ?? ''))) {
    call.destroy();
    throw new EngineError('upstream sent an answer that is not an AWS event stream', 'upstream_error', 502, { retryable: true });
  }
  const frames = new EventStreamDecoder((m) => {
    const kind = m.headers[':message-type'];
    if (kind === 'event') return decoder.onEvent(String(m.headers[':event-type'] ?? ''), m.payload.toString('utf8'));
    if (kind === 'exception') {
      let message = '';
      try {
        message = String(JSON.parse(m.payload.toString('utf8'))?.message ?? '');
      } catch {
        message = m.payload.toString('utf8').slice(0, 500);
      }
      throw streamException(String(m.headers[':exception-type'] ?? 'exception'), up.redact(message));
    }
    if (kind === 'error') throw streamException(String(m.headers[':error-code'] ?? 'error'), up.redact(String(m.headers[':error-message'] ?? '')));
  });
  let ok = false;
  try {
    for await (const chunk of res as AsyncIterable<Buffer>) {
      call.touch();
      try {
        frames.push(chunk);
      } catch (e) {
        if (e instanceof FrameError) throw new EngineError(`upstream sent a broken event stream (${e.message})`, 'upstream_stream_broken', 502, { retryable: true });
        throw e;
      }
      if (decoder.out.length) {
        for (const ev of decoder.out.splice(0)) {
          // an abort stops the answer at once, events already read included
          if (call.cancelled) throw up.mapError(new Error('aborted'), call);
          yield ev;
        }
        call.touch(); // time spent waiting for our consumer is not upstream silence
      }
    }
    try {
      frames.end();
    } catch (e) {
      throw new EngineError(`upstream connection broke mid-stream (${(e as Error).message})`, 'upstream_stream_broken', 502, { retryable: true });
    }
    decoder.finish();
    ok = true;
    yield* decoder.out.splice(0);
  } catch (err) {
    // events decoded before a failure are still delivered, then the failure (an abort: nothing more)
    if (!call.cancelled) yield* decoder.out.splice(0);
    throw err instanceof EngineError ? err : up.mapError(err, call);
  } finally {
    if (ok) call.release();
    else call.destroy();
  }
}

export function createBedrockEngine(opts: BedrockEngineOptions): TextEngine {
  const base = (opts.baseUrl ?? endpointOf(opts.region)).replace(/\/+$/, '');
  const host = new URL(base).host;
  const now = opts.now ?? (() => new Date());
  const upstream = new BedrockUpstream({
    baseUrl: base,
    headers: { accept: 'application/json, application/vnd.amazon.eventstream' },
    timeoutMs: opts.timeoutMs,
    connectTimeoutMs: opts.connectTimeoutMs,
    sign: (method, path, headers, body) =>
      signRequest({ method, host, path, headers, body, region: opts.region, service: SIGNING_SERVICE, credentials: opts.credentials, date: now() }),
  });
  const bodyOpts = { maxTokens: opts.maxTokens ?? DEFAULT_MAX_TOKENS };
  const pathOf = (model: string, stream: boolean) => `/model/${encodeURIComponent(model)}/${stream ? 'converse-stream' : 'converse'}`;
  return {
    kind: 'bedrock',
    contextWindow: opts.contextWindow,
    generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
      if (req.stream === false) {
        // built on the first read, as whole() makes its call then: a refusal is an error of that read
        let inner: AsyncIterator<GenerateEvent> | undefined;
        const it: AsyncIterableIterator<GenerateEvent> = {
          [Symbol.asyncIterator]: () => it,
          next() {
            try {
              if (!inner) {
                const { body, formatTool } = buildConverseBody(req, bodyOpts);
                inner = whole(upstream, pathOf(req.model, false), req, jsonBody(body), new ConverseDecoder(req, formatTool))[Symbol.asyncIterator]();
              }
            } catch (e) {
              return Promise.reject(e);
            }
            return inner.next();
          },
          return: () => inner?.return?.() ?? Promise.resolve({ value: undefined, done: true }),
        };
        return it;
      }
      return (async function* () {
        const { body, formatTool } = buildConverseBody(req, bodyOpts);
        const call = await upstream.post(pathOf(req.model, true), jsonBody(body), req.signal);
        yield* readEventStream(upstream, call, new ConverseDecoder(req, formatTool));
      })();
    },
    probe(_kind, model, signal) {
      return upstream.probe('completion', pathOf(model, false), { messages: [{ role: 'user', content: [{ text: 'ping' }] }], inferenceConfig: { maxTokens: 1 } }, signal);
    },
    /** an estimate (the rule of shared/tokens.ts): Bedrock's CountTokens is a call of its own per request */
    countTokens(req) {
      return estimateTokensInTurns(req.messages, req.tools);
    },
    close() {
      upstream.close();
      return Promise.resolve();
    },
    retire: () => upstream.retire(),
  };
}
