import type { UsageInsert, UsageScope, UsageStore, GroupBy, UsageRow } from './store.js';
import type { KeyPrincipal } from '../keys/verifier.js';

export interface UsageEvent {
  requestId: string;
  key: Pick<KeyPrincipal, 'keyId' | 'userId' | 'orgId'> & Partial<Pick<KeyPrincipal, 'rpmLimit' | 'tpmLimit'>>;
  model: string;
  operation: 'responses' | 'speech' | 'transcription' | 'translation';
  inputTokens?: number;
  outputTokens?: number;
  cachedTokens?: number;
  characters?: number;
  audioSeconds?: number;
  costMicros?: number;
}

export const MICROS = 1_000_000;

/**
 * The usage ledger. Engines' usage is written here by the services after each request; the query APIs
 * read it. Writes are awaited by the caller so an acknowledged request always has its record.
 */
export class UsageService {
  private readonly listeners: Array<(e: UsageEvent) => void> = [];

  constructor(private readonly store: UsageStore) {}

  /** called after each record is written (metrics) */
  onRecord(l: (e: UsageEvent) => void) {
    this.listeners.push(l);
  }

  /**
   * Writes one usage record and resolves once it is committed. Records that arrive while a write is in
   * flight are committed together in the next INSERT (group commit): a lone request waits for one insert,
   * a busy process writes many records per statement instead of queueing one statement per request.
   */
  async record(e: UsageEvent): Promise<void> {
    const row: UsageInsert = {
      request_id: e.requestId,
      key_id: e.key.keyId,
      user_id: e.key.userId,
      org_id: e.key.orgId,
      model: e.model,
      operation: e.operation,
      input_tokens: e.inputTokens ?? 0,
      output_tokens: e.outputTokens ?? 0,
      cached_tokens: e.cachedTokens ?? 0,
      characters: e.characters ?? 0,
      audio_seconds: e.audioSeconds ?? 0,
      cost_micros: Math.round(e.costMicros ?? 0),
      created_at: Math.floor(Date.now() / 1000),
    };
    await new Promise<void>((resolve, reject) => {
      this.pending.push({ row, resolve, reject });
      if (!this.writing) void this.flush();
    });
    for (const l of this.listeners) l(e);
  }

  private pending: Array<{ row: UsageInsert; resolve: () => void; reject: (e: unknown) => void }> = [];
  private writing = false;

  private async flush(): Promise<void> {
    this.writing = true;
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0, 500);
      try {
        await this.store.insert(batch.map((b) => b.row));
        for (const b of batch) b.resolve();
      } catch (err) {
        for (const b of batch) b.reject(err);
      }
    }
    this.writing = false;
  }

  async usage(scope: UsageScope, from: number, to: number, groupBy: GroupBy[]) {
    const rows = await this.store.aggregate(scope, from, to, groupBy);
    const total = rows.reduce(
      (t, r) => ({
        requests: t.requests + r.requests,
        input_tokens: t.input_tokens + r.input_tokens,
        output_tokens: t.output_tokens + r.output_tokens,
        cached_tokens: t.cached_tokens + r.cached_tokens,
        characters: t.characters + r.characters,
        audio_seconds: t.audio_seconds + r.audio_seconds,
        cost: t.cost + r.cost_micros / MICROS,
      }),
      { requests: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0, characters: 0, audio_seconds: 0, cost: 0 },
    );
    return {
      start_time: from,
      end_time: to,
      group_by: groupBy,
      list: rows.map(({ cost_micros, ...r }: UsageRow) => ({ ...r, cost: cost_micros / MICROS })),
      total,
    };
  }

  async balance(scope: UsageScope) {
    const { granted, used } = await this.store.balance(scope);
    return { granted: granted / MICROS, used: used / MICROS, balance: (granted - used) / MICROS, currency: 'credits' };
  }

  async grant(userId: string, orgId: string, amount: number, note = ''): Promise<void> {
    await this.store.grant(userId, orgId, Math.round(amount * MICROS), note, Math.floor(Date.now() / 1000));
  }
}
