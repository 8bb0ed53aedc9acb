/**
 * Anthropic's Messages API in front of any text model: prepare (./prepare.ts: Anthropic's request as the engines'
 * GenerateRequest), then run as one message object or a stream of Anthropic's events (./run.ts). Nothing is
 * stored; usage is recorded as for chat completions, under the operation the module declares.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import type { Metering } from '../api/metering.js';
import type { Admission } from '../api/admission.js';
import { fromEngineError } from '../api/engine-errors.js';
import { MessagesPreparer, type PreparedMessage } from './prepare.js';
import { MessagesRunner, type Obj } from './run.js';
import type { CountTokensRequest, MessagesRequest } from './schemas.js';

export interface MessagesDeps {
  models: ModelRegistry;
  engines: TextEngineSource;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** reservations at admission (billing, TPM limits; src/api/admission.ts); without it nothing is reserved */
  admission?: Admission;
}

export class MessagesService {
  private readonly preparer: MessagesPreparer;
  private readonly runner: MessagesRunner;

  constructor(d: MessagesDeps) {
    this.preparer = new MessagesPreparer(d);
    this.runner = new MessagesRunner(d);
  }

  prepare(req: MessagesRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts): Promise<PreparedMessage> {
    return this.preparer.prepare(req, key, requestId, facts);
  }

  json(p: PreparedMessage, signal: AbortSignal): Promise<Obj> {
    return this.runner.json(p, signal);
  }

  stream(p: PreparedMessage, signal: AbortSignal): AsyncIterable<Obj> {
    return this.runner.stream(p, signal);
  }

  /** the conversation's input tokens, as the serving engine counts them (nothing is generated, nothing charged) */
  async countTokens(req: CountTokensRequest, key: KeyPrincipal, facts?: RequestFacts): Promise<{ input_tokens: number }> {
    const { engine, count } = await this.preparer.prepareCount(req, key, facts);
    try {
      return { input_tokens: await engine.countTokens(count) };
    } catch (e) {
      facts?.failed(e);
      throw fromEngineError(e);
    }
  }
}
