import type { FeatureModule } from '../../platform/module.js';
import type { KeyService } from './service.js';
import { registerKeyRoutes } from './routes/index.js';

/** The six key operations of spec 4.1 for both kinds of key, under {portal_base_url}; every route takes a portal user. */
export function createKeysModule(deps: { management: KeyService; inference: KeyService }): FeatureModule {
  return {
    name: 'keys',
    routes: {
      portal: (app) => {
        registerKeyRoutes(app, { service: deps.management, base: '/management/api-keys', tag: 'Management API Keys' });
        registerKeyRoutes(app, { service: deps.inference, base: '/api-keys', tag: 'Inference API Keys' });
      },
    },
  };
}
