import type { UserPrincipal } from '../../platform/auth/jwt.js';
import type { OperatorRow, OperatorStore } from './store.js';

const now = () => Math.floor(Date.now() / 1000);

/**
 * Who operates the installation: a platform role, apart from the administrators of an organization. A user is an
 * operator when their token's claim says so (PORTICO_OPERATOR_CLAIM, read by the JWT verifier), or when the
 * database records them (`portico operators add`, another operator, or the first user of a fresh install on the
 * embedded default). An operator sees every user and organization (/v1/admin).
 */
export class Operators {
  private firstSettled = false;

  constructor(
    private readonly store: OperatorStore,
    /** the first user seen on a fresh install becomes an operator (the embedded default: Portico signs its own tokens) */
    private readonly firstUser: boolean,
  ) {}

  /** whether the user is an operator now: by the token's claim, or recorded */
  async isOperator(user: UserPrincipal): Promise<boolean> {
    if (user.operator) return true;
    return (await this.store.get(user.userId)) !== undefined;
  }

  /** whether the database records the user as an operator (a key's owner: no token to read a claim from) */
  async isRecorded(userId: string): Promise<boolean> {
    return (await this.store.get(userId)) !== undefined;
  }

  /**
   * Keeps the record of an operator by claim in line with their newest token, for what works without a token (their
   * Management API Keys with the operator scope): a token with the claim records them (source `claim`), one without
   * it removes a record the claim made (never one made otherwise).
   */
  async followClaim(user: UserPrincipal): Promise<void> {
    if (user.operator) await this.store.add({ user_id: user.userId, source: 'claim', added_by: '', created_at: now() });
    else await this.store.remove(user.userId, ['claim']);
  }

  /**
   * Told of every portal user Portico recognizes: on a fresh install where the first user becomes an operator, the
   * first one seen does (once, whichever instance sees them). After that, one flag read: no database query.
   */
  async seen(user: UserPrincipal): Promise<void> {
    if (!this.firstUser || this.firstSettled) return;
    if (await this.store.firstSettled()) {
      this.firstSettled = true;
      return;
    }
    await this.store.claimFirst(user.userId, now());
    this.firstSettled = true;
  }

  list(): Promise<OperatorRow[]> {
    return this.store.list();
  }

  get(userId: string): Promise<OperatorRow | undefined> {
    return this.store.get(userId);
  }

  /** Records an operator; undefined when they were one already. */
  add(userId: string, source: 'cli' | 'api', addedBy: string): Promise<OperatorRow | undefined> {
    return this.store.add({ user_id: userId, source, added_by: addedBy, created_at: now() });
  }

  /** Removes a recorded operator (the row), or undefined when there was none. A claim still makes them one. */
  remove(userId: string): Promise<OperatorRow | undefined> {
    return this.store.remove(userId);
  }
}
