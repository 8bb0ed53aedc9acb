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
import { estimateTextTokens } from './tokens.js';

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
      let text: string;
      try {
        text = await up.readText(call, MAX_BYTES);
      } catch (e) {
        call.destroy();
        throw e instanceof EngineError ? e : up.mapError(e, call);
      }
      return parseAnswer(text, req);
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

/** The upstream's list, in input order, checked: one vector of numbers per input, all of one length. */
export function parseAnswer(text: string, req: EmbedRequest): EmbedResult {
  let j: { data?: unknown; usage?: { prompt_tokens?: unknown }; model?: unknown };
  try {
    j = JSON.parse(text);
  } catch {
    throw unreadable('not JSON');
  }
  if (!j || typeof j !== 'object' || !Array.isArray(j.data)) throw unreadable('no data list');
  const vectors: number[][] = new Array(req.input.length);
  j.data.forEach((d: { index?: unknown; embedding?: unknown }, i: number) => {
    const index = typeof d?.index === 'number' ? d.index : i;
    if (!Number.isInteger(index) || index < 0 || index >= req.input.length || vectors[index]) throw unreadable(`item ${i} has a wrong index`);
    const e = d.embedding;
    let v: number[];
    if (typeof e === 'string') {
      const buf = Buffer.from(e, 'base64');
      if (buf.length % 4 !== 0) throw unreadable(`item ${i} is not float32 base64`);
      v = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
    } else if (Array.isArray(e) && e.every((x) => typeof x === 'number' && Number.isFinite(x))) v = e as number[];
    else throw unreadable(`item ${i} has no vector`);
    vectors[index] = v;
  });
  if (j.data.length !== req.input.length || vectors.some((v) => !v)) throw unreadable(`${j.data.length} vectors for ${req.input.length} inputs`);
  if (vectors.some((v) => v.length !== vectors[0]!.length || v.length === 0)) throw unreadable('vectors of different lengths');
  const reported = j.usage?.prompt_tokens;
  const inputTokens =
    typeof reported === 'number' && Number.isFinite(reported) && reported >= 0
      ? reported
      : req.input.reduce<number>((n, x) => n + (typeof x === 'string' ? estimateTextTokens(x) : x.length), 0);
  return { vectors, inputTokens, model: typeof j.model === 'string' ? j.model : undefined };
}
