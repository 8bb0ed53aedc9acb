/** The usage a portal user reads (GET /v1/portal/query/usage, by operation and model), for the tests that check charges. */
import assert from 'node:assert/strict';
import type { TestApp } from './app.js';

export interface UsageRow {
  operation: string;
  model: string;
  input_tokens: number;
  output_tokens: number;
  cached_tokens?: number;
  cache_write_tokens?: number;
  cost: number;
}

/** `user`'s usage rows of `model` (every row when no model is named), on a listening test app */
export async function usageRows(t: TestApp & { url?: string }, model?: string, user = 'alice'): Promise<UsageRow[]> {
  const res = await fetch(`${t.url}/v1/portal/query/usage?group_by=operation,model`, { headers: { authorization: `Bearer ${await t.token(user)}` } });
  assert.equal(res.status, 200, await res.clone().text());
  const rows = ((await res.json()) as { data: { list: UsageRow[] } }).data.list;
  return model === undefined ? rows : rows.filter((r) => r.model === model);
}
