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
import { MessagesPreparer, type PreparedMessage, type RequestContext } from './prepare.js';
import { EngineError } from '../engines/types.js';
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

  /** `ctx`: the schema's verdict and the client's anthropic-beta values (./prepare.ts RequestContext) */
  prepare(req: MessagesRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts, ctx?: RequestContext): Promise<PreparedMessage> {
    return this.preparer.prepare(req, key, requestId, facts, ctx);
  }

  json(p: PreparedMessage, signal: AbortSignal): Promise<Obj> {
    return this.runner.json(p, signal);
  }

  stream(p: PreparedMessage, signal: AbortSignal): AsyncIterable<Obj> {
    return this.runner.stream(p, signal);
  }

  /**
   * The conversation's input tokens, as the serving engine counts them (nothing is generated, nothing charged);
   * forwarded (./forwarding.ts), the upstream's own answer as it wrote it.
   */
  async countTokens(req: CountTokensRequest, key: KeyPrincipal, facts?: RequestFacts, ctx?: RequestContext): Promise<Record<string, unknown>> {
    const { engine, count, forward, betas, route } = await this.preparer.prepareCount(req, key, facts, ctx);
    try {
      if (forward) {
        facts?.engineStarted();
        for await (const o of engine.messages!({ body: forward, count: true, betas, route })) {
          facts?.engineEnded();
          return o;
        }
        throw new EngineError('the upstream sent no answer', 'upstream_error', 502);
      }
      return { input_tokens: await engine.countTokens(count) };
    } catch (e) {
      facts?.failed(e);
      throw fromEngineError(e);
    }
  }
}
