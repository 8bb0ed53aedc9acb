/**
 * The OpenAI-wire embeddings engine (openai-compatible's, and azure-openai's over its own Upstream): POST {base_url}/embeddings of any server that has it (OpenAI,
 * vLLM, Ollama, llama.cpp server, LocalAI, TEI's OpenAI route...). The input (texts or token arrays),
 * `dimensions` and `user` are forwarded; vectors are always asked for as floats (`encoding_format: "float"`,
 * which every such server has) and Portico encodes base64 for a client that wants it. An upstream that answers
 * base64 anyway is decoded. The upstream's refusals (a model without `dimensions`, too long an input) keep
 * their message and come back as 400s.
 *
 * Built on the Upstream's public methods (post, mapError) so the transport under it can change.
 */
import { EngineError, type EmbedRequest, type EmbedResult, type EmbeddingsEngine } from '../types.js';
import { jsonBody, Upstream } from './http.js';
import { estimateTextTokens, estimateTextsTokensInTurns } from './tokens.js';
import { BodyBlocks, OFF_THREAD_BYTES } from '../../platform/http/json-body.js';
import { decodeAnswer } from './embeddings-answer.js';
import { decodeOffThread } from './embeddings-decoder.js';

export interface OpenAICompatibleEmbeddingsOptions {
  /** e.g. http://127.0.0.1:11434/v1 */
  baseUrl: string;
  apiKey?: string;
  /** ms to wait for the answer's headers, and the longest silence while it arrives (default 300000) */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  headers?: Record<string, string>;
}

/** the largest answer read (2048 vectors of 3072 floats as JSON text are ~130 MB; more is not an answer) */
const MAX_BYTES = 256 * 1024 * 1024;

export function createOpenAICompatibleEmbeddingsEngine(opts: OpenAICompatibleEmbeddingsOptions): EmbeddingsEngine {
  return openaiEmbeddingsEngine(new Upstream(opts), 'openai-compatible');
}

/** The engine over a given transport (a provider with its own addressing or auth passes its Upstream subclass). */
export function openaiEmbeddingsEngine(up: Upstream, kind: string): EmbeddingsEngine {
  return {
    kind,
    async embed(req: EmbedRequest): Promise<EmbedResult> {
      const body: Record<string, unknown> = { model: req.model, input: req.input, encoding_format: 'float' };
      if (req.dimensions !== undefined) body.dimensions = req.dimensions;
      if (req.user !== undefined) body.user = req.user;
      const call = await up.post('/embeddings', jsonBody(body), req.signal);
      let text: string | BodyBlocks;
      try {
        text = await up.readTextOrBlocks(call, MAX_BYTES, OFF_THREAD_BYTES);
      } catch (e) {
        call.destroy();
        throw e instanceof EngineError ? e : up.mapError(e, call);
      }
      return typeof text === 'string' ? parseAnswer(text, req) : parseLargeAnswer(text, req);
    },
    probe(kind, model, signal) {
      return up.probe(kind, '/embeddings', { model, input: 'ping', encoding_format: 'float' }, signal);
    },
    close() {
      up.close();
      return Promise.resolve();
    },
    retire: () => up.retire(),
  };
}

const unreadable = (why: string) => new EngineError(`upstream sent an unreadable embeddings answer (${why})`, 'upstream_error', 502, { retryable: true });

const reportedTokens = (reported: unknown): number | undefined => (typeof reported === 'number' && Number.isFinite(reported) && reported >= 0 ? reported : undefined);

/** The upstream's list, in input order, checked: one vector of numbers per input, all of one length. */
export function parseAnswer(text: string, req: EmbedRequest): EmbedResult {
  const d = decodeAnswer(text, req.input.length);
  if ('unreadable' in d) throw unreadable(d.unreadable);
  const inputTokens = reportedTokens(d.reported) ?? req.input.reduce<number>((n, x) => n + (typeof x === 'string' ? estimateTextTokens(x) : x.length), 0);
  return { vectors: d.vectors, inputTokens, model: d.model };
}

/**
 * parseAnswer for an answer read in blocks (past OFF_THREAD_BYTES): decoded, parsed and checked in a worker
 * thread, the vectors sent back packed in one Float64Array (moved, not copied: a structured clone of millions of
 * numbers costs the receiving thread ~0.2 us each) and given as they came (PackedVectors): millions of numbers in
 * arrays on the event loop were tens of MiB of heap for its collector. The same vectors and the same refusals as
 * parseAnswer on the text; the token estimate, when the upstream gives no usage, counted in slices.
 */
export async function parseLargeAnswer(blocks: BodyBlocks, req: EmbedRequest): Promise<EmbedResult> {
  const a = await decodeOffThread(blocks, req.input.length);
  if (!a.ok) throw unreadable(a.unreadable);
  const texts = req.input.every((x) => typeof x === 'string');
  const inputTokens =
    reportedTokens(a.reported) ??
    (texts ? await estimateTextsTokensInTurns(req.input as string[]) : req.input.reduce<number>((n, x) => n + (typeof x === 'string' ? estimateTextTokens(x) : x.length), 0));
  return { vectors: { flat: a.flat, count: a.count, dims: a.dims }, inputTokens, model: a.model };
}
