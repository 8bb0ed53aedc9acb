/**
 * Chat Completions as the route sees them: prepare (./prepare.ts), then run as one JSON object or a stream of
 * chunks (./run.ts). Nothing is stored: Portico keeps no chat completions (there is no GET of one); usage is
 * recorded as for the Responses API.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import type { Metering } from '../api/metering.js';
import type { Admission } from '../api/admission.js';
import { ChatPreparer, type PreparedChat } from './prepare.js';
import { ChatRunner, type Obj } from './run.js';
import type { ChatCompletionRequest } from './schemas.js';

export interface ChatDeps {
  models: ModelRegistry;
  engines: TextEngineSource;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** reservations at admission (billing, TPM limits; src/api/admission.ts); without it nothing is reserved */
  admission?: Admission;
}

export class ChatService {
  private readonly preparer: ChatPreparer;
  private readonly runner: ChatRunner;

  constructor(d: ChatDeps) {
    this.preparer = new ChatPreparer(d);
    this.runner = new ChatRunner(d);
  }

  /** `facts`: the request's (req.facts), filled as it runs */
  prepare(req: ChatCompletionRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts): Promise<PreparedChat> {
    return this.preparer.prepare(req, key, requestId, facts);
  }

  json(p: PreparedChat, signal: AbortSignal): Promise<Obj> {
    return this.runner.json(p, signal);
  }

  stream(p: PreparedChat, signal: AbortSignal): AsyncIterable<Obj> {
    return this.runner.stream(p, signal);
  }
}
