/**
 * Admission with reservations (issue 22 §4): a request that generates holds its worst case before it runs, in
 * the payer's balance (BudgetGuard, when billing is on) and in the key's TPM window (RateLimiter, when a TPM
 * limit applies), and settles both with its real usage when it is recorded:
 *
 *   worst case = input tokens (estimated) + the most output it may produce (max_output_tokens / max_tokens /
 *                max_completion_tokens, else RESERVE_OUTPUT_TOKENS bounded by the model's context window),
 *                at the model's price
 *
 * A request whose worst case does not fit what is left is refused (429 insufficient_quota or
 * rate_limit_exceeded, saying the reservation). One that runs is stopped once its output passes what it
 * reserved (`Hold.outputLimit`: the features compare a running count per chunk), and is never charged more
 * than it reserved (UsageService.record). Both reservations are one atomic step each in their store (a Lua
 * script in Redis), made at once; the balance's expires after RESERVATION_TTL_MS if its request never settles
 * it (a crashed process).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RateLimiter, TokenHold } from '../platform/cluster/limits.js';
import type { ModelSpec } from '../models/spec.js';
import { Prices } from '../models/pricing.js';
import type { BudgetGuard } from '../portal/usage/budget.js';
import type { UsageHold } from '../portal/usage/service.js';

/** a reservation is in tokens: their prices are the models' own (no unit a feature declares) */
const TOKEN_PRICES = new Prices();

export interface AdmissionOptions {
  /** output tokens reserved when the request names no maximum (RESERVE_OUTPUT_TOKENS) */
  defaultOutputTokens: number;
  /** how long a reservation of the balance holds if it is never settled (RESERVATION_TTL_MS) */
  ttlMs: number;
  log: Pick<FastifyBaseLogger, 'warn'>;
  /** a request refused by a reservation (metrics) */
  onRefused?: (reason: 'rate_limit' | 'quota') => void;
  /** a request admitted by its reservations (the key's last use is recorded then, not at the gate) */
  onAdmitted?: (key: KeyPrincipal) => void;
}

export class Admission {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly budget: BudgetGuard,
    private readonly opts: AdmissionOptions,
  ) {}

  /** whether anything is reserved for this key's requests (billing on, or a TPM limit): else no estimate is needed */
  applies(key: KeyPrincipal): boolean {
    return this.budget.enabled || this.limiter.tpmOf(key) > 0;
  }

  /**
   * The plain balance check of a request that does not run now (a background response, reserved when a worker
   * runs it): refused once nothing is left. One read of the running spend.
   */
  check(key: KeyPrincipal): Promise<void> {
    return this.budget.check(key);
  }

  /** The most output a request may produce: what it asked for, else the default bounded by the context window. */
  outputCap(requested: number | undefined, inputTokens: number, contextWindow?: number): number {
    if (requested !== undefined && requested > 0) return requested;
    const cap = this.opts.defaultOutputTokens;
    return contextWindow ? Math.max(1, Math.min(cap, contextWindow - inputTokens)) : cap;
  }

  /**
   * Reserves `inputTokens + outputTokens` at the model's price in the balance and the same tokens in the TPM
   * window (at once, one round trip each); refused with the store's error, and what was held of the other given back.
   */
  async reserve(key: KeyPrincipal, spec: Pick<ModelSpec, 'pricing'>, inputTokens: number, outputTokens: number): Promise<Hold> {
    const input = Math.max(0, Math.ceil(inputTokens));
    const output = Math.max(0, Math.ceil(outputTokens));
    const micros = Math.ceil(TOKEN_PRICES.costMicros(spec, { inputTokens: input, outputTokens: output }));
    const [tokens, money] = await Promise.allSettled([this.limiter.reserveTokens(key, input, output), this.budget.reserve(key, micros, this.opts.ttlMs, { input, output })]);
    if (tokens.status === 'rejected' || money.status === 'rejected') {
      if (tokens.status === 'fulfilled' && tokens.value) this.settleTokens(tokens.value, 0);
      if (money.status === 'fulfilled' && money.value) this.budget.release(key, money.value);
      const refused = tokens.status === 'rejected' ? tokens : (money as PromiseRejectedResult);
      const code = (refused.reason as { code?: string })?.code;
      if (code === 'rate_limit_exceeded') this.opts.onRefused?.('rate_limit');
      else if (code === 'insufficient_quota') this.opts.onRefused?.('quota');
      throw refused.reason;
    }
    this.opts.onAdmitted?.(key);
    return new Hold(this, key, input, output, tokens.value, money.value, this.budget.enabled ? micros : undefined);
  }

  /** @internal */
  settleTokens(hold: TokenHold, used: number): void {
    this.limiter.settleTokens(hold, used).catch((e) => this.opts.log.warn({ err: (e as Error).message }, 'tokens reserved in the TPM window not settled'));
  }

  /** @internal */
  release(key: KeyPrincipal, reservation: string): void {
    this.budget.release(key, reservation);
  }
}

/**
 * What one request holds. The first usage record that carries it settles it (`take`); `release` gives back
 * whatever is still held (the request ended with no record, or failed before its output): call it when the
 * request is over, whatever happened.
 */
export class Hold implements UsageHold {
  private done = false;

  constructor(
    private readonly admission: Admission,
    private readonly key: KeyPrincipal,
    /** the input tokens reserved (the estimate) */
    readonly inputTokens: number,
    /** the output tokens reserved: a request whose running count passes this is stopped */
    readonly outputLimit: number,
    private readonly tokens: TokenHold | undefined,
    private readonly reservation: string | undefined,
    /** the micro-credits reserved (billing on): the most the request is charged */
    private readonly capMicros: number | undefined,
  ) {}

  take(tokens: number): { reservation?: string; capMicros?: number } | undefined {
    if (this.done) return undefined;
    this.done = true;
    if (this.tokens) this.admission.settleTokens(this.tokens, tokens);
    return { reservation: this.reservation, capMicros: this.capMicros };
  }

  release(): void {
    if (this.done) return;
    this.done = true;
    if (this.tokens) this.admission.settleTokens(this.tokens, 0);
    if (this.reservation) this.admission.release(this.key, this.reservation);
  }
}

/**
 * A running count of the output a request produced, compared with its reservation on each chunk: the number of
 * pieces that carried text (an upstream sends about one token each) or an eighth of their characters, whichever
 * is more (a lower bound of the tokens, so an answer within its max_output_tokens is never cut; an upstream that
 * sends many tokens per piece is still caught, and its charge stops at the reservation).
 */
export class OutputCount {
  pieces = 0;
  chars = 0;

  /** adds a piece of output, unless it would pass `limit` (then true, and the count stays what was shown) */
  add(text: string, limit: number): boolean {
    if (!text) return false;
    if (Math.max(this.pieces + 1, (this.chars + text.length) >> 3) > limit) return true;
    this.pieces++;
    this.chars += text.length;
    return false;
  }

  /** the output shown, in tokens as usage estimates count them (~4 characters a token, at least a token a piece) */
  get tokens(): number {
    return Math.max(this.pieces, Math.ceil(this.chars / 4));
  }
}
