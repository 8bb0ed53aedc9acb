import type { FeatureModule } from '../platform/module.js';
import { ChatService, type ChatDeps } from './service.js';
import { CHAT_OPERATION } from './run.js';
import completions from './routes/completions.js';

/** The Chat Completions API under {base_url}: POST /chat/completions (JSON, or Server-Sent Events with stream: true). */
export function createChatModule(deps: ChatDeps): FeatureModule {
  const service = new ChatService(deps);
  return {
    name: 'chat',
    // its own scope: `responses` does not open /chat/completions (docs/api.md, "Scopes"); tokens are charged
    scope: 'chat',
    operations: [CHAT_OPERATION],
    routes: {
      api: (app) => completions(app, service),
    },
  };
}
