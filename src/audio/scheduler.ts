/**
 * Fair turns on the embedded audio engines (issue 22, §5). The engines of an instance run a few jobs at once
 * (`slots`: decoder processes, synthesis workers); every request for them takes its turns here, so that no key
 * holds them for everyone else:
 *
 * - Each key (an API key's id) has a queue of its own, first in first out; when a slot frees, the keys with a
 *   turn waiting are served in turn (round robin), one turn each, a key holding fewer slots first (so a key that
 *   comes while another holds every slot gets the next one). A long request is cut into many turns (pieces of
 *   audio, sentences of text), so another key's short request waits for one turn, not for the whole of it.
 * - A request is admitted with its whole cost (seconds of audio, characters): the work it has reserved and not
 *   started counts as the key's queued work, and a key may have at most `maxQueuedPerKey` of it (429
 *   rate_limit_exceeded with retry-after). A key with nothing queued may always queue one request, whatever its
 *   size (the request's own limits bound it).
 * - The wait of a new request for its first turn is estimated from the work ahead of it (the rest of the
 *   running turns, the key's own queued work, and what round robin serves of the other keys' before it) and the
 *   measured speed of a slot; past `maxWaitMs` the request is refused at once (503 engine_overloaded with
 *   retry-after), rather than left to wait longer than a client or its proxy will.
 * - A turn whose signal aborts (its client went away) leaves the queue at once; closing a ticket gives back what
 *   it had reserved and not used.
 * - A request may name a lane: the engine it runs on, when that engine runs fewer jobs at once than there are slots
 *   (whisper's one context: `TranscriptionEngine.concurrency`). At most `limit` turns of a lane run at once: a turn
 *   whose lane is full waits here, its key keeping its place in line, and the free slot goes to the next turn that
 *   may start (another key's on another engine, or a later turn of the same key on another engine). So a job never
 *   holds a slot while it waits inside its engine, and the turns waiting for a lane are served in the keys' order
 *   too, not in the engine's own first come first served. A request on a lane has its wait estimated on the lane
 *   as well (its turns poured into `limit` slots), the later of the two.
 *
 * The speed is work per second of one slot, learnt from the turns that completed (a decaying average weighted
 * by their time, so short turns do not swing it), starting from `initialSpeed`.
 */
import { AppError } from '../platform/errors.js';
import { abortError } from '../platform/async-channel.js';

export interface FairSchedulerOptions {
  /** what it schedules, in messages: "transcription" */
  what: string;
  /** the unit of work, in messages: "seconds of audio" */
  unit: string;
  /** turns that run at once */
  slots: number;
  /** work one key may have admitted and not started */
  maxQueuedPerKey: number;
  /** the setting of maxQueuedPerKey, named in the refusal */
  maxQueuedSetting: string;
  /** the longest estimated wait for a request's first turn */
  maxWaitMs: number;
  /** work per second of one slot until turns have been measured */
  initialSpeed: number;
  /** the clock (tests) */
  now?: () => number;
}

/**
 * An engine that runs at most `limit` jobs at once, whatever the slots: its turns share `limit` of them. `id` is what
 * tells two lanes apart (the engine object: two models on the same provider are two lanes).
 */
export interface Lane {
  readonly id: object;
  readonly limit: number;
}

/** A slot, given for one turn: `done(true)` when the work completed (its time is measured), `done(false)` otherwise. */
export interface Turn {
  done(completed: boolean): void;
}

/** What a request's turns share: its key and the work it was admitted with. */
export interface Ticket {
  readonly key: string;
  /** waits for a turn of `cost` (rejects at once when the signal aborts, and when the ticket is closed) */
  step(cost: number, signal?: AbortSignal): Promise<Turn>;
  /** no more turns: what was reserved and not started is given back, turns still waiting are refused */
  close(): void;
}

export interface SchedulerSnapshot {
  slots: number;
  running: number;
  /** work per second of one slot */
  speed: number;
  keys: Array<{ key: string; queued: number; waitingTurns: number; runningTurns: number }>;
}

interface KeyState {
  /** work admitted and not started */
  reserved: number;
  /** turns waiting, in order */
  waiting: Step[];
  runningTurns: number;
  tickets: number;
}

interface Step {
  ticket: TicketImpl;
  cost: number;
  resolve(t: Turn): void;
  reject(e: unknown): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Running {
  cost: number;
  startedAt: number;
  lane?: Lane;
}

/** how many seconds of turns the initial speed weighs, and how much each measured turn leaves of the past */
const PRIOR_SECONDS = 10;
const DECAY = 0.8;

export class FairScheduler {
  private readonly keys = new Map<string, KeyState>();
  /** keys with a turn waiting, in the order they are served */
  private readonly ring: string[] = [];
  private readonly running = new Set<Running>();
  /** the turns running on each lane (none kept at 0) */
  private readonly onLane = new Map<object, number>();
  private readonly now: () => number;
  /** decaying sums of the work and the seconds of completed turns (the speed is their ratio) */
  private work: number;
  private seconds: number;

  constructor(private readonly o: FairSchedulerOptions) {
    this.now = o.now ?? (() => performance.now());
    this.work = o.initialSpeed * PRIOR_SECONDS;
    this.seconds = PRIOR_SECONDS;
  }

  /** work per second of one slot */
  get speed(): number {
    return this.work / this.seconds;
  }

  /**
   * Admits a request of `cost` for `key`, or refuses it: 429 when the key's queued work would pass its cap, 503
   * when the request would wait longer than allowed for its first turn. `unchecked`: neither rule applies (work
   * that cannot be refused, such as a spoken answer already under way). `lane`: the engine its turns run on, when
   * that engine runs fewer jobs at once than there are slots (its turns then wait here for room on it).
   */
  admit(key: string, cost: number, opts: { unchecked?: boolean; lane?: Lane } = {}): Ticket {
    if (!opts.unchecked) this.check(key, cost, opts.lane);
    const s = this.state(key);
    s.reserved += cost;
    s.tickets++;
    return new TicketImpl(this, key, cost, opts.lane);
  }

  /**
   * Refuses as admit would, before the cost is known (a transcription's upload is decoded after this): the key's
   * queue already full, or the wait too long (on `lane`, the engine it would run on, when it has one).
   */
  check(key: string, cost = 0, lane?: Lane): void {
    const queued = this.queuedOf(key);
    if (queued > 0 && queued + cost > this.o.maxQueuedPerKey) {
      // the key's own work must start before this request fits: that much of it, or all of it for a request
      // larger than the cap
      const drain = cost >= this.o.maxQueuedPerKey ? queued : queued + cost - this.o.maxQueuedPerKey;
      throw this.refusal(
        'rate_limit_exceeded',
        `This API key already has ${round(queued)} ${this.o.unit} of ${this.o.what} waiting on this server, and at most ${this.o.maxQueuedPerKey} may wait ` +
          `(${this.o.maxQueuedSetting}); this request would add ${round(cost)}. Send it when more of the work already sent has started.`,
        this.waitMs(key, drain, lane),
      );
    }
    const wait = this.waitMs(key, queued, lane);
    if (wait > this.o.maxWaitMs) {
      throw this.refusal(
        'engine_overloaded',
        `The ${this.o.what} engines of this server are busy: this request would wait about ${Math.ceil(wait / 1000)} s for its turn, ` +
          `longer than the ${Math.round(this.o.maxWaitMs / 1000)} s allowed (AUDIO_MAX_WAIT_MS). Try again later.`,
        wait - this.o.maxWaitMs,
      );
    }
  }

  /** The estimated wait (ms) of a new request of `key` for its first turn (on `lane`, when its engine has one). */
  estimateWaitMs(key: string, lane?: Lane): number {
    return this.waitMs(key, this.queuedOf(key), lane);
  }

  snapshot(): SchedulerSnapshot {
    return {
      slots: this.o.slots,
      running: this.running.size,
      speed: this.speed,
      keys: [...this.keys].map(([key, s]) => ({ key, queued: this.pending(s), waitingTurns: s.waiting.length, runningTurns: s.runningTurns })),
    };
  }

  // ---------------------------------------------------------------- turns (TicketImpl calls these)

  /** @internal */
  enqueue(step: Step): void {
    const s = this.state(step.ticket.key);
    s.waiting.push(step);
    if (s.waiting.length === 1) this.ring.push(step.ticket.key);
    this.dispatch();
  }

  /** @internal a waiting turn leaves: its signal aborted, or its ticket closed */
  drop(step: Step, err: unknown): void {
    const key = step.ticket.key;
    const s = this.keys.get(key);
    const i = s ? s.waiting.indexOf(step) : -1;
    if (!s || i < 0) return;
    s.waiting.splice(i, 1);
    if (s.waiting.length === 0) this.ring.splice(this.ring.indexOf(key), 1);
    if (step.onAbort) step.signal?.removeEventListener('abort', step.onAbort);
    step.reject(err);
    this.tidy(key, s);
  }

  /** @internal the ticket gives back what it reserved and did not start */
  release(ticket: TicketImpl, unused: number): void {
    const s = this.keys.get(ticket.key);
    if (!s) return;
    s.reserved = Math.max(0, s.reserved - unused);
    s.tickets--;
    for (const step of s.waiting.filter((w) => w.ticket === ticket)) this.drop(step, new Error(`the ${this.o.what} request is over`));
    this.tidy(ticket.key, s);
  }

  // ---------------------------------------------------------------- inside

  private state(key: string): KeyState {
    let s = this.keys.get(key);
    if (!s) {
      s = { reserved: 0, waiting: [], runningTurns: 0, tickets: 0 };
      this.keys.set(key, s);
    }
    return s;
  }

  /** work admitted and not started (turns of unchecked tickets, which reserve nothing, count while they wait) */
  private pending(s: KeyState): number {
    let waiting = 0;
    for (const w of s.waiting) waiting += w.cost;
    return Math.max(s.reserved, waiting);
  }

  private queuedOf(key: string): number {
    const s = this.keys.get(key);
    return s ? this.pending(s) : 0;
  }

  private tidy(key: string, s: KeyState): void {
    if (s.tickets === 0 && s.waiting.length === 0 && s.runningTurns === 0) this.keys.delete(key);
  }

  /** whether a turn on `lane` may start now (a slot being free): its lane has room, or it has none */
  private roomOn(lane: Lane | undefined): boolean {
    return !lane || (this.onLane.get(lane.id) ?? 0) < lane.limit;
  }

  /**
   * Gives free slots to waiting turns: of the keys with a turn that may start (the first of its queue whose lane
   * has room), the one holding the fewest slots now (the first in line among equals), which then goes to the back of
   * the line. A key none of whose turns may start keeps its place.
   */
  private dispatch(): void {
    while (this.running.size < this.o.slots && this.ring.length > 0) {
      let at = -1;
      let which = 0;
      let fewest = Infinity;
      for (let i = 0; i < this.ring.length && fewest > 0; i++) {
        const s = this.keys.get(this.ring[i]!)!;
        if (s.runningTurns >= fewest) continue;
        const j = s.waiting.findIndex((w) => this.roomOn(w.ticket.lane));
        if (j < 0) continue;
        fewest = s.runningTurns;
        at = i;
        which = j;
      }
      // every turn waiting is on a full lane
      if (at < 0) return;
      const key = this.ring.splice(at, 1)[0]!;
      const s = this.keys.get(key)!;
      const step = s.waiting.splice(which, 1)[0]!;
      if (s.waiting.length > 0) this.ring.push(key);
      this.start(key, s, step);
    }
  }

  private start(key: string, s: KeyState, step: Step): void {
    if (step.onAbort) step.signal?.removeEventListener('abort', step.onAbort);
    const taken = step.ticket.take(step.cost);
    s.reserved = Math.max(0, s.reserved - taken);
    s.runningTurns++;
    const lane = step.ticket.lane;
    const r: Running = { cost: step.cost, startedAt: this.now(), lane };
    this.running.add(r);
    if (lane) this.onLane.set(lane.id, (this.onLane.get(lane.id) ?? 0) + 1);
    let over = false;
    step.resolve({
      done: (completed: boolean) => {
        if (over) return;
        over = true;
        this.running.delete(r);
        s.runningTurns--;
        if (lane) {
          const n = this.onLane.get(lane.id)! - 1;
          if (n > 0) this.onLane.set(lane.id, n);
          else this.onLane.delete(lane.id);
        }
        const seconds = (this.now() - r.startedAt) / 1000;
        if (completed && seconds > 0 && r.cost > 0) {
          this.work = this.work * DECAY + r.cost;
          this.seconds = this.seconds * DECAY + seconds;
        }
        this.tidy(key, s);
        this.dispatch();
      },
    });
  }

  /**
   * When (ms from now) a new turn would start if `own` of the key's work is ahead of it: on the slots, and on its
   * lane when it has one that runs fewer turns at once than the slots (the later of the two).
   */
  private waitMs(key: string, own: number, lane?: Lane): number {
    const slots = this.pour(key, own);
    if (!lane || lane.limit >= this.o.slots) return slots;
    // the key's work on the lane, no more than `own`
    let mine = 0;
    for (const w of this.keys.get(key)?.waiting ?? []) if (w.ticket.lane?.id === lane.id) mine += w.cost;
    return Math.max(slots, this.pour(key, Math.min(own, mine), lane));
  }

  /**
   * When (ms from now) a new turn would start if `own` of the key's work is ahead of it: the other keys' work
   * that is served before it (of each, as much as `own` and the turn at its head; with nothing of its own ahead,
   * only the turns at the head of keys holding no more slots than it does), poured with `own` into the slots as
   * they free (each running turn frees its slot when its rest is done at the measured speed). With `lane`: only
   * the turns on that lane, poured into as many slots as it runs turns at once.
   */
  private pour(key: string, own: number, lane?: Lane): number {
    const speed = this.speed;
    const now = this.now();
    const free: number[] = [];
    for (const r of this.running) if (!lane || r.lane?.id === lane.id) free.push(Math.max(0, r.cost / speed - (now - r.startedAt) / 1000));
    const width = lane ? Math.min(lane.limit, this.o.slots) : this.o.slots;
    while (free.length < width) free.push(0);
    free.sort((a, b) => a - b);
    const holds = this.keys.get(key)?.runningTurns ?? 0;
    let ahead = own;
    for (const [k, s] of this.keys) {
      if (k === key) continue;
      let head = 0;
      let pending: number;
      if (lane) {
        pending = 0;
        let first = true;
        for (const w of s.waiting) {
          if (w.ticket.lane?.id !== lane.id) continue;
          if (first) head = w.cost;
          first = false;
          pending += w.cost;
        }
      } else {
        head = s.waiting[0]?.cost ?? 0;
        pending = this.pending(s);
      }
      if (own > 0) ahead += Math.min(pending, own + head);
      else if (s.runningTurns <= holds) ahead += head;
    }
    return fill(free, ahead / speed) * 1000;
  }

  private refusal(code: 'rate_limit_exceeded' | 'engine_overloaded', message: string, retryMs: number): AppError {
    const ms = Math.max(1000, Math.ceil(retryMs));
    return new AppError(code, message, null, { headers: { 'retry-after': String(Math.ceil(ms / 1000)), 'retry-after-ms': String(ms) } });
  }
}

/**
 * The time at which `work` slot-seconds are done when poured into slots that free at the times `free` (sorted):
 * each slot works from when it frees, all until the same end.
 */
export function fill(free: readonly number[], work: number): number {
  let sum = 0;
  for (let k = 1; k <= free.length; k++) {
    sum += free[k - 1]!;
    const t = (work + sum) / k;
    if (k === free.length || t <= free[k]!) return t;
  }
  return 0;
}

function round(x: number): number {
  return Math.round(x * 10) / 10;
}

class TicketImpl implements Ticket {
  private left: number;
  private closed = false;

  constructor(
    private readonly scheduler: FairScheduler,
    readonly key: string,
    cost: number,
    /** the engine its turns run on, when it runs fewer jobs at once than the slots */
    readonly lane?: Lane,
  ) {
    this.left = cost;
  }

  /** a turn of `cost` starts: the part of it that was reserved */
  take(cost: number): number {
    const taken = Math.min(cost, this.left);
    this.left -= taken;
    return taken;
  }

  step(cost: number, signal?: AbortSignal): Promise<Turn> {
    if (this.closed) return Promise.reject(new Error('the request is over'));
    if (signal?.aborted) return Promise.reject(abortError(signal));
    return new Promise<Turn>((resolve, reject) => {
      const step: Step = { ticket: this, cost, resolve, reject, signal };
      if (signal) {
        step.onAbort = () => this.scheduler.drop(step, abortError(signal));
        signal.addEventListener('abort', step.onAbort, { once: true });
      }
      this.scheduler.enqueue(step);
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const unused = this.left;
    this.left = 0;
    this.scheduler.release(this, unused);
  }
}
