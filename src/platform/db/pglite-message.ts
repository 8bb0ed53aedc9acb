/**
 * What the main thread and the PGlite thread (pglite-client.ts, pglite-worker.ts) agree on beyond structured
 * clone. Free of imports: the thread loads nothing but PGlite.
 */

/** a large jsonb parameter crosses as `{ [JSONB_TEXT_KEY]: Uint8Array }`: the UTF-8 bytes of its text, moved */
export const JSONB_TEXT_KEY = '__porticoJsonbText';
