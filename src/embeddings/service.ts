/**
 * Embeddings: the model and its engine (looked up as every feature does: models.require, then
 * engines.embeddings, so routing around that lookup applies here too), the input checked as OpenAI checks it,
 * vectors encoded as the client asked (float arrays, or base64 of little-endian float32), and the usage
 * recorded before the answer is sent.
 */
import type { FastifyBaseLogger } from 'fastify';
import { AppError, type ValidationDetail } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { EmbeddingsEngine, RouteNote } from '../engines/types.js';
import type { ModelRegistry } from '../models/registry.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import { fromEngineError } from '../api/engine-errors.js';
import { resolveEngine, resolveModel, type Metering } from '../api/metering.js';
import type { Admission, Hold } from '../api/admission.js';
import { MAX_INPUTS, type EmbeddingsRequest } from './schemas.js';
import { estimateTextTokens, estimateTextsTokensInTurns } from '../engines/shared/tokens.js';
import { answerBytes } from './answer-bytes.js';

export interface EmbeddingsDeps {
  models: ModelRegistry;
  engines: TextEngineSource;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** reservations at admission (billing, TPM limits; src/api/admission.ts); without it nothing is reserved */
  admission?: Admission;
}

export interface EmbeddingsAnswerBody {
  object: 'list';
  data: Array<{ object: 'embedding'; index: number; embedding: number[] | string }>;
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

/** the usage operation of an embeddings request (declared by the module) */
export const EMBEDDINGS_OPERATION = 'embeddings';

const bad = (message: string, param: string, detail: ValidationDetail = 'invalid_value') => new AppError('validation_error', message, param, { detail });

/** Each input as the engines take it: texts, or token arrays; none empty (OpenAI refuses empty input too). */
export function normalizeInput(input: EmbeddingsRequest['input']): Array<string | number[]> {
  if (typeof input === 'string') {
    if (input.length === 0) throw bad("Invalid 'input': empty string. Expected a non-empty string, or an array of them.", 'input');
    return [input];
  }
  if (input.length === 0) throw bad("Invalid 'input': empty array. Expected at least 1 input.", 'input', 'array_below_min_length');
  if (typeof input[0] === 'number') return [input as number[]];
  if (input.length > MAX_INPUTS) {
    throw bad(`Invalid 'input': array too long. Expected at most ${MAX_INPUTS} inputs, but got ${input.length}; send them in several requests.`, 'input', 'array_above_max_length');
  }
  return (input as Array<string | number[]>).map((x, i) => {
    if (x.length === 0) throw bad(`Invalid 'input[${i}]': empty ${typeof x === 'string' ? 'string' : 'token array'}. Every input must have something to embed.`, `input[${i}]`);
    return x;
  });
}

/** numbers encoded to base64 between two turns of the event loop (~2-4 ms) */
const BASE64_SLICE = 200_000;

/**
 * The worst case of the input's tokens (an estimate for texts, exact for token arrays); 2048 texts may be 16 Mi
 * characters: counted in slices then (estimateTextsTokensInTurns, the same number).
 */
function inputEstimate(input: Array<string | number[]>): Promise<number> | number {
  if (typeof input[0] === 'string') return estimateTextsTokensInTurns(input as string[]);
  return input.reduce<number>((n, x) => n + (typeof x === 'string' ? estimateTextTokens(x) : x.length), 0);
}

/** float32 little-endian bytes, base64 (what OpenAI sends for encoding_format base64, and the SDK decodes) */
export function toBase64(v: readonly number[]): string {
  const f = Float32Array.from(v);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('base64');
}

export class EmbeddingsService {
  constructor(private readonly d: EmbeddingsDeps) {}

  /**
   * The answer; for a large one (the engine's vectors packed: ../engines/types.ts PackedVectors) its JSON bytes,
   * made in a worker thread (./answer-bytes.ts): the same bytes JSON.stringify makes of the answer.
   * `facts`: the request's (req.facts), filled as it runs
   */
  async create(req: EmbeddingsRequest, key: KeyPrincipal, requestId: string, signal: AbortSignal, facts?: RequestFacts): Promise<EmbeddingsAnswerBody | Buffer> {
    const spec = resolveModel(this.d.models, req.model, 'embeddings', key, facts);
    const input = normalizeInput(req.input);
    const engine = await resolveEngine(() => this.d.engines.embeddings(spec), facts);
    // the worst case is the input (an estimate for texts, exact for token arrays), reserved before the engine is called
    const a = this.d.admission;
    let hold: Hold | undefined;
    if (a?.applies(key)) {
      const worst = inputEstimate(input);
      hold = await a.reserve(key, spec, typeof worst === 'number' ? worst : await worst, 0);
    }
    try {
      return await this.run(req, key, requestId, signal, facts, spec, engine, input, hold);
    } finally {
      hold?.release();
    }
  }

  private async run(
    req: EmbeddingsRequest,
    key: KeyPrincipal,
    requestId: string,
    signal: AbortSignal,
    facts: RequestFacts | undefined,
    spec: ModelSpec,
    engine: EmbeddingsEngine,
    input: Array<string | number[]>,
    hold: Hold | undefined,
  ): Promise<EmbeddingsAnswerBody | Buffer> {
    const model = upstreamName(spec);
    let result;
    const route: RouteNote = {};
    if (facts) facts.route = route;
    facts?.engineStarted();
    try {
      result = await engine.embed({ model, input, dimensions: req.dimensions, user: req.user, signal, route });
      if (facts) {
        facts.firstOutput();
        facts.engineEnded();
      }
    } catch (e) {
      if (signal.aborted) throw e;
      facts?.failed(e);
      const err = fromEngineError(e, 'the embeddings engine');
      if (err.code !== 'validation_error' && err.code !== 'context_length_exceeded') throw err;
      // a refusal of the request: name the parameter it is about
      throw new AppError(err.code, err.message, req.dimensions !== undefined && /dimension/i.test(err.message) ? 'dimensions' : 'input', err.detail ? { detail: err.detail } : {});
    }
    const vectors = result.vectors;
    const count = Array.isArray(vectors) ? vectors.length : vectors.count;
    if (count !== input.length) throw new AppError('engine_error', `the embeddings engine gave ${count} vectors for ${input.length} inputs`);
    const inputTokens = Math.max(0, Math.round(result.inputTokens));
    await this.d.metering.charge({ requestId, key, spec, operation: EMBEDDINGS_OPERATION, used: { inputTokens }, deployment: route.deployment, hold, facts });
    const base64 = req.encoding_format === 'base64';
    const answer = (data: EmbeddingsAnswerBody['data']): EmbeddingsAnswerBody => ({
      object: 'list',
      data,
      // the model name the client sent, whatever the upstream calls it (docs/models.md)
      model: spec.name,
      usage: { prompt_tokens: inputTokens, total_tokens: inputTokens },
    });
    // a large answer: its items written in the worker thread, around the rest of the answer made here
    if (!Array.isArray(vectors)) return answerBytes(answer([]), vectors, base64);
    const data: EmbeddingsAnswerBody['data'] = new Array(vectors.length);
    let numbers = 0;
    for (let index = 0; index < data.length; index++) {
      const v = vectors[index]!;
      // base64 of thousands of vectors: a turn of the event loop every BASE64_SLICE numbers
      if (base64 && (numbers += v.length) >= BASE64_SLICE) {
        numbers = 0;
        await new Promise<void>((r) => setImmediate(r));
      }
      data[index] = { object: 'embedding', index, embedding: base64 ? toBase64(v) : v };
    }
    return answer(data);
  }
}
