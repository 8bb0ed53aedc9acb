import assert from 'node:assert/strict';
import type { ScriptedUpstream } from './scripted-upstream.js';

/**
 * The two helpers every endpoint suite uses against a listening app with one inference key: `call` (a request
 * with the key, a JSON body when one is given, a string body sent as it is) and `last` (the body of the last
 * request the scripted upstream received).
 */
export function keyedCalls(url: string, key: string, up: Pick<ScriptedUpstream, 'requests'>) {
  return {
    call: (method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> =>
      fetch(url + path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      }),
    last: (): any => {
      const r = up.requests[up.requests.length - 1];
      assert.ok(r, 'the upstream received no request');
      return r.body;
    },
  };
}
