import type { KeyService } from '../service.js';

/** What each key route needs: the service of its kind of key, where it is mounted and its OpenAPI tag. */
export interface KeyRoutesDeps {
  service: KeyService;
  /** path of the collection, e.g. /management/api-keys */
  base: string;
  /** OpenAPI tag */
  tag: string;
}
