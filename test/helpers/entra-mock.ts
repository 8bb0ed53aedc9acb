/**
 * A scripted Entra ID (Azure AD) token endpoint for the azure-openai provider's `auth: entra` tests: node:http on
 * 127.0.0.1, port 0, answering `POST /{tenant}/oauth2/v2.0/token` as the v2.0 endpoint does for the client
 * credentials grant (a form-encoded body; {token_type, expires_in, ext_expires_in, access_token}).
 *
 *   const idp = await startEntraMock({ tenant: 'contoso.onmicrosoft.com', clientId, clientSecret });
 *   authority_host: idp.url
 *   idp.script({ expiresIn: 1 }, { status: 401, error: 'invalid_client' });
 *   idp.requests[0].form.get('scope'); idp.issued (the tokens given, in order)
 *
 * Without a script, a request with the right grant, scope, client id and secret gets a new token `entra-token-N`
 * (expires_in 3599); a wrong client id or secret gets Entra's 401 invalid_client (AADSTS7000215), an unknown
 * tenant a 400 invalid_request (AADSTS90002), a wrong grant or scope a 400 (unsupported_grant_type,
 * invalid_scope). Failure scripts: an error status with Entra's body, a hang, garbage, a reset; `gate` holds the
 * answer until the promise settles (a fetch in flight, for tests of requests that share it).
 */
import type http from 'node:http';
import { opening, sendJson, startRecordingMock, type MockRequest, type RecordingMock } from './recording-mock.js';

export interface EntraReply {
  /** seconds (default 3599) */
  expiresIn?: number | string;
  /** the token to issue (default entra-token-N) */
  token?: string;
  /** an error answer: this status with Entra's error body */
  status?: number;
  error?: string;
  /** the AADSTS number of the error (error_codes[0], and the description's prefix) */
  aadsts?: number;
  description?: string;
  /** a 200 with this body as it is */
  raw?: string;
  hang?: boolean;
  reset?: boolean;
  /** the answer waits for this */
  gate?: Promise<void>;
}

export interface EntraRequest extends MockRequest {
  tenant?: string;
  form: URLSearchParams;
}

/** url: the authority host (authority_host / AZURE_AUTHORITY_HOST); a reply not scripted is `{}` (a token, when the request is right) */
export interface EntraMock extends RecordingMock<EntraRequest, EntraReply> {
  /** the tokens issued, in order */
  issued: string[];
}

export async function startEntraMock(opts: { tenant: string; clientId: string; clientSecret: string }): Promise<EntraMock> {
  const issued: string[] = [];
  let n = 0;

  const json = (res: http.ServerResponse, status: number, body: unknown) =>
    sendJson(res, status, body, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store, no-cache' });
  const refuse = (res: http.ServerResponse, status: number, error: string, aadsts: number, description: string) =>
    json(res, status, {
      error,
      error_description: `AADSTS${aadsts}: ${description} Trace ID: 0000 Correlation ID: 0000 Timestamp: 2026-01-01 00:00:00Z`,
      error_codes: [aadsts],
      timestamp: '2026-01-01 00:00:00Z',
      trace_id: '0000',
      correlation_id: '0000',
    });

  const mock = await startRecordingMock<EntraRequest, EntraReply>({
    defaultReply: {},
    describe(head, req) {
      const path = new URL(req.url ?? '/', 'http://x').pathname;
      const m = /^\/([^/]+)\/oauth2\/v2\.0\/token$/.exec(path);
      return { path, tenant: m ? decodeURIComponent(m[1]!) : undefined, form: new URLSearchParams(head.raw) };
    },
    async answer(rec, req, res, replies) {
      const r = replies.next();
      if (r.gate) await r.gate;
      if (await opening(r, req)) return;
      if (r.status !== undefined) {
        const aadsts = r.aadsts ?? 7000215;
        return refuse(res, r.status, r.error ?? 'invalid_client', aadsts, r.description ?? 'Invalid client secret provided.');
      }
      if (r.raw !== undefined) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(r.raw);
      }
      if (rec.method !== 'POST' || rec.tenant === undefined) return json(res, 404, { error: 'not_found' });
      if (!String(rec.headers['content-type']).startsWith('application/x-www-form-urlencoded')) {
        return refuse(res, 400, 'invalid_request', 900144, "The request body must contain the following parameter: 'grant_type'.");
      }
      if (rec.tenant !== opts.tenant) return refuse(res, 400, 'invalid_request', 90002, `Tenant '${rec.tenant}' not found.`);
      if (rec.form.get('grant_type') !== 'client_credentials') return refuse(res, 400, 'unsupported_grant_type', 70003, 'The app requested an unsupported grant type.');
      if (rec.form.get('scope') !== 'https://cognitiveservices.azure.com/.default') return refuse(res, 400, 'invalid_scope', 1002012, 'The provided value for scope is not valid.');
      if (rec.form.get('client_id') !== opts.clientId) return refuse(res, 400, 'unauthorized_client', 700016, 'Application not found in the directory.');
      if (rec.form.get('client_secret') !== opts.clientSecret) return refuse(res, 401, 'invalid_client', 7000215, 'Invalid client secret provided.');
      const token = r.token ?? `entra-token-${++n}`;
      issued.push(token);
      const expiresIn = r.expiresIn ?? 3599;
      json(res, 200, { token_type: 'Bearer', expires_in: expiresIn, ext_expires_in: expiresIn, access_token: token });
    },
  });
  return Object.assign(mock, { issued });
}
