/**
 * The embedded llama.cpp embeddings engine (node-llama-cpp's embedding context): one GGUF embedding model (an
 * encoder such as BERT, nomic-bert, or a decoder converted with a pooling type such as Qwen3-Embedding), one
 * context evaluating one input at a time (node-llama-cpp serializes them), vectors pooled as the model file says.
 *
 * - Vectors are L2-normalized (unit length, as OpenAI's are), so a dot product is the cosine similarity.
 * - `dimensions`: the model's own size is always accepted; fewer only when the model is configured as a
 *   Matryoshka model (`matryoshka: true`: trained so that a prefix of its vector is a vector), then the vector
 *   is cut and normalized again. Otherwise a 400 that says the model's size.
 * - Token-array input is taken as ids of the model's vocabulary (checked against its size).
 * - Every input is checked against the context before any is evaluated: a too-long input is a 400 naming it.
 */
import { availableParallelism } from 'node:os';
import type { LlamaEmbeddingContext, LlamaModel, Llama, Token } from 'node-llama-cpp';
import { EngineError, type EmbedRequest, type EmbedResult, type EmbeddingsEngine } from '../types.js';
import { sharedLlama } from './engine.js';
import { abortError } from './util.js';
import { whenIdle } from '../shared/idle.js';

export interface LlamaEmbeddingsOptions {
  /** path of the .gguf file */
  path: string;
  /** tokens of the longest input (default: what the model was trained on, at most 8192) */
  contextSize?: number;
  /** CPU threads (default: 1 for models under 64 MB, else all cores up to 8) */
  threads?: number;
  /** false (default): CPU only; 'auto': a GPU binary when node-llama-cpp has one installed */
  gpu?: false | 'auto';
  /** the model was trained with Matryoshka representation learning: `dimensions` may ask for fewer */
  matryoshka?: boolean;
  /** load at creation (default true) */
  eager?: boolean;
}

export class LlamaEmbeddingsEngine implements EmbeddingsEngine {
  readonly kind = 'llama';
  private loading: Promise<void> | undefined;
  private llama: Llama | undefined;
  private model: LlamaModel | undefined;
  private context: LlamaEmbeddingContext | undefined;
  private ctxSize = 0;
  private vocabSize = 0;
  private closed = false;
  loadMs: number | undefined;

  constructor(private readonly opts: LlamaEmbeddingsOptions) {
    if (!opts.path) throw new EngineError('llama embeddings engine: a model path is required', 'invalid_config', 500);
  }

  /** the size of the model's vectors (once loaded) */
  get dimensions(): number | undefined {
    return this.model?.embeddingVectorSize;
  }

  info(): { device: string; loadMs?: number } {
    return { device: this.llama ? (this.llama.gpu ? `GPU (${this.llama.gpu})` : 'CPU') : 'not loaded', loadMs: this.loadMs };
  }

  load(): Promise<void> {
    if (this.closed) return Promise.reject(new EngineError('llama engine is closed', 'engine_closed', 503));
    this.loading ??= this.doLoad().catch((err) => {
      this.loading = undefined;
      throw err instanceof EngineError ? err : new EngineError(`Could not load the embedding model: ${(err as Error).message}`, 'model_load_failed', 500);
    });
    return this.loading;
  }

  private async doLoad(): Promise<void> {
    const t0 = Date.now();
    this.llama = await sharedLlama(this.opts.gpu ?? false);
    const model = await this.llama.loadModel({ modelPath: this.opts.path });
    try {
      const size = Math.min(this.opts.contextSize ?? 8192, model.trainContextSize || 512);
      const threads = this.opts.threads ?? (model.size < 64 * 1024 * 1024 ? 1 : Math.min(8, availableParallelism()));
      // an encoder sees the whole input in one batch: the batch is the context
      this.context = await model.createEmbeddingContext({ contextSize: size, batchSize: size, threads });
      this.ctxSize = size;
      const tokens: unknown = model.fileInfo.metadata?.tokenizer?.ggml?.tokens;
      this.vocabSize = Array.isArray(tokens) ? tokens.length : 0;
      this.model = model;
    } catch (e) {
      await model.dispose().catch(() => undefined);
      throw e;
    }
    this.loadMs = Date.now() - t0;
  }

  /** embed calls under way (a retiring engine closes once there are none) */
  private active = 0;

  async embed(req: EmbedRequest): Promise<EmbedResult> {
    this.active++;
    try {
      return await this.embedNow(req);
    } finally {
      this.active--;
    }
  }

  /** Closes once no embed call is under way (a reload retired this model). */
  async retire(): Promise<void> {
    await whenIdle(() => this.closed || this.active === 0);
    await this.close();
  }

  private async embedNow(req: EmbedRequest): Promise<EmbedResult> {
    await this.load();
    const ctx = this.context!;
    const native = this.model!.embeddingVectorSize;
    let dims = native;
    if (req.dimensions !== undefined && req.dimensions !== native) {
      if (!this.opts.matryoshka) {
        throw new EngineError(`This model gives vectors of ${native} dimensions and cannot shorten them: leave 'dimensions' out or set it to ${native}.`, 'invalid_value', 400);
      }
      if (req.dimensions > native) throw new EngineError(`This model gives vectors of at most ${native} dimensions; 'dimensions' was ${req.dimensions}.`, 'invalid_value', 400);
      dims = req.dimensions;
    }
    // all inputs are checked before any is evaluated
    const inputs = req.input.map((x, i) => {
      if (typeof x === 'string') return x;
      for (const t of x) {
        if (!Number.isInteger(t) || t < 0 || (this.vocabSize > 0 && t >= this.vocabSize)) {
          throw new EngineError(`input[${i}]: token ${t} is not in this model's vocabulary (0 to ${this.vocabSize - 1})`, 'invalid_value', 400);
        }
      }
      return x.slice() as Token[];
    });
    let inputTokens = 0;
    inputs.forEach((x, i) => {
      const n = ctx.calculateInputLength(Array.isArray(x) ? x.slice() : x);
      if (n >= this.ctxSize) {
        throw new EngineError(`input[${i}] is ${n} tokens, more than this model takes (${this.ctxSize - 1} tokens); shorten or split it.`, 'context_length_exceeded', 400);
      }
      inputTokens += n;
    });
    const vectors: number[][] = [];
    for (const x of inputs) {
      if (req.signal?.aborted) throw abortError(req.signal);
      if (this.closed) throw new EngineError('llama engine is closed', 'engine_closed', 503);
      let v: readonly number[];
      try {
        v = (await ctx.getEmbeddingFor(Array.isArray(x) ? x.slice() : x)).vector;
      } catch (e) {
        throw new EngineError(`Embedding failed: ${(e as Error).message}`, 'engine_error', 500);
      }
      vectors.push(normalize(dims < v.length ? v.slice(0, dims) : v));
    }
    return { vectors, inputTokens };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.loading) {
      await this.loading.catch(() => undefined);
      await this.context?.dispose().catch(() => undefined);
      await this.model?.dispose().catch(() => undefined);
    }
  }
}

/** The vector at unit length (a zero vector stays zero). */
export function normalize(v: readonly number[]): number[] {
  let sum = 0;
  for (const x of v) sum += x * x;
  const n = Math.sqrt(sum);
  return n > 0 ? v.map((x) => x / n) : [...v];
}

/** Creates the engine; with `eager` (default) the model is loaded before this resolves. */
export async function createLlamaEmbeddingsEngine(opts: LlamaEmbeddingsOptions): Promise<LlamaEmbeddingsEngine> {
  const e = new LlamaEmbeddingsEngine(opts);
  if (opts.eager !== false) await e.load();
  return e;
}
