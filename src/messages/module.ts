import type { FeatureModule } from '../platform/module.js';
import { MessagesService, type MessagesDeps } from './service.js';
import { MESSAGES_OPERATION } from './run.js';
import { MESSAGES_SCOPE } from './scope.js';
import messages from './routes/messages.js';
import countTokens from './routes/count-tokens.js';

/**
 * Anthropic's Messages API under {base_url}: POST /messages (JSON, or Anthropic's event stream with stream: true)
 * and POST /messages/count_tokens, served by any text model (docs/api.md, "Anthropic Messages API").
 */
export function createMessagesModule(deps: MessagesDeps): FeatureModule {
  const service = new MessagesService(deps);
  return {
    name: 'anthropic-messages',
    // its own scope: neither `chat` nor `responses` opens it (docs/api.md, "Scopes"); tokens are charged
    scope: MESSAGES_SCOPE,
    operations: [MESSAGES_OPERATION],
    routes: {
      api: (app) => {
        messages(app, service);
        countTokens(app, service);
      },
    },
  };
}
