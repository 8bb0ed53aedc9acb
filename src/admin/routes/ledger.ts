import { AppError, msg } from '../../platform/errors.js';
import type { LedgerFilter, RequestFilter } from '../store.js';

/** The ledger filter of a query string (usage, requests, CSV): the time range defaults to the 30 days before now. */
export function ledgerFilter(q: {
  start_time?: number;
  end_time?: number;
  user_id?: string;
  org_id?: string;
  key_id?: string;
  model?: string;
  deployment?: string;
  operation?: string;
  request_id?: string;
}): LedgerFilter {
  const to = q.end_time ?? Math.floor(Date.now() / 1000) + 1;
  const from = q.start_time ?? to - 30 * 86400;
  if (from >= to) throw new AppError('validation_error', msg('query_time_order'), 'start_time');
  return {
    from,
    to,
    userId: q.user_id,
    orgId: q.org_id,
    keyId: q.key_id,
    model: q.model,
    deployment: q.deployment,
    operation: q.operation,
    requestId: q.request_id,
  };
}

/** the requests' filter: the ledger's, the status ('ok', 'error' or a number) and a request id prefix */
export function requestFilter(q: Parameters<typeof ledgerFilter>[0] & { status?: string; q?: string }): RequestFilter {
  const status = q.status === undefined ? undefined : q.status === 'ok' || q.status === 'error' ? q.status : Number(q.status);
  return { ...ledgerFilter(q), status, q: q.q };
}
