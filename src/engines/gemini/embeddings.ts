/**
 * The `gemini` embeddings engine: POST {base_url}/v1beta/models/{model}:batchEmbedContents, one request per input
 * text (`content.parts[0].text`), `dimensions` as `outputDimensionality`. Gemini embeds text only: token arrays
 * are refused (400 unsupported_parameter). Its answer (`embeddings[].values`, in input order) carries no token
 * count: usage is Portico's estimate (shared/tokens.ts). `user` has no equivalent and changes no vector: it is
 * not sent.
 */
import { EngineError, type EmbedRequest, type EmbedResult, type EmbeddingsEngine } from '../types.js';
import { jsonBody } from '../shared/http.js';
import { estimateTextTokens } from '../shared/tokens.js';
import { GeminiUpstream, upstreamOptions, type GeminiEngineOptions } from './index.js';
import { modelPath } from './request.js';

/** the largest answer read */
const MAX_BYTES = 256 * 1024 * 1024;

const unreadable = (why: string) => new EngineError(`upstream sent an unreadable embeddings answer (${why})`, 'upstream_error', 502, { retryable: true });

/** the most requests one batchEmbedContents takes */
export const MAX_BATCH = 100;

export function createGeminiEmbeddingsEngine(opts: GeminiEngineOptions): EmbeddingsEngine {
  const up = new GeminiUpstream(upstreamOptions(opts));
  /** one batchEmbedContents call: its vectors, in order, checked */
  const batch = async (requests: Record<string, unknown>[], model: string, signal: AbortSignal | undefined): Promise<number[][]> => {
    const call = await up.post(`${modelPath(model)}:batchEmbedContents`, jsonBody({ requests }), signal);
    let text: string;
    try {
      text = await up.readText(call, MAX_BYTES);
    } catch (e) {
      call.destroy();
      throw e instanceof EngineError ? e : up.mapError(e, call);
    }
    let j: any;
    try {
      j = JSON.parse(text);
    } catch {
      throw unreadable('not JSON');
    }
    if (!j || !Array.isArray(j.embeddings)) throw unreadable('no embeddings list');
    if (j.embeddings.length !== requests.length) throw unreadable(`${j.embeddings.length} vectors for ${requests.length} inputs`);
    return j.embeddings.map((e: any, i: number) => {
      const v = e?.values;
      if (!Array.isArray(v) || v.length === 0 || !v.every((x: unknown) => typeof x === 'number' && Number.isFinite(x))) throw unreadable(`item ${i} has no vector`);
      return v as number[];
    });
  };
  return {
    kind: 'gemini',
    async embed(req: EmbedRequest): Promise<EmbedResult> {
      const model = 'models/' + req.model.replace(/^models\//, '');
      const requests = req.input.map((x, i) => {
        if (typeof x !== 'string')
          throw new EngineError(`'input'[${i}]: token arrays are not supported by this model (Gemini embeds text only); send the text.`, 'unsupported_parameter', 400);
        const r: Record<string, unknown> = { model, content: { parts: [{ text: x }] } };
        if (req.dimensions !== undefined) r.outputDimensionality = req.dimensions;
        return r;
      });
      // Gemini takes at most 100 requests per batch: a longer input is sent as consecutive batches, in order
      const vectors: number[][] = [];
      for (let i = 0; i < requests.length; i += MAX_BATCH) vectors.push(...(await batch(requests.slice(i, i + MAX_BATCH), req.model, req.signal)));
      if (vectors.some((v: number[]) => v.length !== vectors[0]!.length)) throw unreadable('vectors of different lengths');
      return { vectors, inputTokens: req.input.reduce<number>((n, x) => n + estimateTextTokens(x as string), 0), model: req.model };
    },
    probe(kind, model, signal) {
      return up.probe(kind, `${modelPath(model)}:embedContent`, { content: { parts: [{ text: 'ping' }] } }, signal);
    },
    close() {
      up.close();
      return Promise.resolve();
    },
    retire: () => up.retire(),
  };
}
