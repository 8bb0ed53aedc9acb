import type { FastifyRequest } from 'fastify';
import type { FeatureModule } from '../platform/module.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { WsLimits } from '../platform/config.js';
import { ResponsesService, type ResponsesDeps } from './service.js';
import { RESPONSES_OPERATIONS } from './run.js';
import { SPOKEN_CHARACTERS } from './speech.js';
import { Compactor } from './compact.js';
import { WsHub } from './ws/hub.js';
import create from './routes/create.js';
import get from './routes/get.js';
import del from './routes/delete.js';
import cancel from './routes/cancel.js';
import inputItems from './routes/input-items.js';
import inputTokens from './routes/input-tokens.js';
import compact from './routes/compact.js';
import ws from './routes/ws.js';

export interface ResponsesModuleDeps extends ResponsesDeps {
  /** the embedded database belongs to this process alone: what was running when it last stopped is orphaned */
  orphansAreOurs: boolean;
  /** a running background job whose instance has been silent this long is failed by the sweep (ms) */
  backgroundStaleMs: number;
  /** the WebSocket mode: its limits, and how one of its turns is admitted (the {base_url} gate, again per turn) */
  ws?: { limits: WsLimits; admit: (req: FastifyRequest) => Promise<KeyPrincipal> };
}

export interface ResponsesModule extends FeatureModule {
  readonly service: ResponsesService;
  /** the open WebSocket connections; `close(graceMs)` drains them (the HTTP application's preClose) */
  readonly sockets?: WsHub;
}

/** The Responses API under {base_url}: create (JSON, stream, background), its companions, compact, the WebSocket mode. */
export async function createResponsesModule(deps: ResponsesModuleDeps): Promise<ResponsesModule> {
  const service = new ResponsesService(deps);
  if (deps.orphansAreOurs) await service.background.failOrphans();
  await service.background.startMaintenance(deps.backgroundStaleMs);
  const compactor = new Compactor({ models: deps.models, preparer: service.preparer, runner: service.runner, sealer: service.sealer });
  const sockets = deps.ws ? new WsHub({ svc: service, admit: deps.ws.admit, limits: deps.ws.limits, log: deps.log }) : undefined;
  return {
    name: 'responses',
    scope: 'responses',
    // a spoken answer is charged as speech: its characters, on the speech model
    operations: Object.values(RESPONSES_OPERATIONS),
    units: deps.speaker ? [SPOKEN_CHARACTERS] : [],
    service,
    sockets,
    routes: {
      api: (app) => {
        create(app, service);
        get(app, service);
        del(app, service);
        cancel(app, service);
        inputItems(app, service);
        inputTokens(app, service);
        compact(app, compactor);
        if (sockets) ws(app, sockets);
      },
    },
    close: (graceMs) => service.close(graceMs),
  };
}
