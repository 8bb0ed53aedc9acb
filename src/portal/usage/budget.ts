import { AppError } from '../../platform/errors.js';
import { DEFAULT_ORG } from '../../platform/auth/jwt.js';
import type { UsageService } from './service.js';
import type { UsageScope } from './store.js';

/**
 * With billing enabled, a request is refused (429 insufficient_quota) once the balance of the key's scope
 * (the owner's personal credits, or the organization's) is spent. Balances are read from the ledger and kept
 * for a short moment; a recorded charge drops the cached balance so the next request sees it.
 */
export class BudgetGuard {
  private readonly cache = new Map<string, { balance: number; at: number }>();

  constructor(
    private readonly usage: UsageService,
    readonly enabled: boolean,
    private readonly freshMs = 1000,
  ) {}

  static scopeOf(k: { userId: string; orgId: string }): UsageScope {
    return k.orgId === DEFAULT_ORG ? { orgId: DEFAULT_ORG, userId: k.userId } : { orgId: k.orgId };
  }

  private cacheKey(s: UsageScope) {
    return `${s.orgId}\u0001${s.userId ?? ''}`;
  }

  async check(k: { userId: string; orgId: string }): Promise<void> {
    if (!this.enabled) return;
    const scope = BudgetGuard.scopeOf(k);
    const ck = this.cacheKey(scope);
    const now = Date.now();
    let e = this.cache.get(ck);
    if (!e || now - e.at > this.freshMs) {
      e = { balance: (await this.usage.balance(scope)).balance, at: now };
      this.cache.set(ck, e);
    }
    if (e.balance <= 0) {
      throw new AppError('insufficient_quota', `You exceeded your current quota: the balance of ${scope.userId === undefined ? `organization ${scope.orgId}` : 'your account'} is ${e.balance} credits.`);
    }
  }

  charged(k: { userId: string; orgId: string }) {
    if (this.enabled) this.cache.delete(this.cacheKey(BudgetGuard.scopeOf(k)));
  }
}
