/**
 * Running a prepared chat completion: as one JSON object or as a stream of chunks, forwarded (the upstream's
 * own answer) or generated (engine events folded into OpenAI's chunks). Both ways, the request is charged from
 * the engine's usage before the client gets the end of the answer (the chunks that carry `finish_reason` and
 * the usage are held until the usage record is written), and a client that leaves, or a failure after output
 * started, is charged what was produced (estimated when the engine could not say).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { GenerateEvent } from '../engines/types.js';
import type { Metering } from '../api/metering.js';
import { fromEngineError } from '../api/engine-errors.js';
import { EngineError } from '../engines/types.js';
import type { PreparedChat } from './prepare.js';
import type { Admission, Hold } from '../api/admission.js';

export type Obj = Record<string, unknown>;

/** the usage operation of a chat completion (declared by the module) */
export const CHAT_OPERATION = 'chat.completions';

export interface ChatRunDeps {
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** reservations at admission (billing, TPM limits); without it nothing is reserved */
  admission?: Admission;
}

interface Counted {
  inputTokens: number;
  outputTokens: number;
  cachedTokens?: number;
  cacheWriteTokens?: number;
  cacheWrite1hTokens?: number;
}

/** What an answer produced so far: the engine's usage once known, else the text for an estimate. */
class Meter {
  usage: Counted | undefined;
  /** the engine's prompt-cache writes, told before its usage chunk (OpenAI's usage object has no place for them) */
  writes: Pick<Counted, 'cacheWriteTokens' | 'cacheWrite1hTokens'> = {};
  chars = 0;
  /** pieces of output (a choice's delta that carried text): about a token each from an upstream */
  pieces = 0;

  /**
   * Whether the output so far passes `limit` tokens: the pieces or an eighth of the characters, whichever is more
   * (a lower bound of the tokens: an answer within its max_tokens is never cut; see api/admission.ts OutputCount)
   */
  over(limit: number): boolean {
    return Math.max(this.pieces, this.chars >> 3) > limit;
  }

  /** what was counted so far (to take back a piece that is not shown) */
  mark(): [number, number] {
    return [this.chars, this.pieces];
  }
  back([chars, pieces]: [number, number]): void {
    this.chars = chars;
    this.pieces = pieces;
  }

  /** a chunk (or a whole completion) went by */
  see(o: Obj): void {
    const u = o.usage as { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } } | null | undefined;
    if (u && typeof u === 'object') {
      const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);
      this.usage = { inputTokens: n(u.prompt_tokens), outputTokens: n(u.completion_tokens), cachedTokens: n(u.prompt_tokens_details?.cached_tokens), ...this.writes };
    }
    const choices = o.choices;
    if (!Array.isArray(choices)) return;
    for (const c of choices as Obj[]) {
      const m = (c.delta ?? c.message) as Obj | undefined;
      if (!m) continue;
      const before = this.chars;
      for (const k of ['content', 'reasoning_content', 'refusal'] as const) if (typeof m[k] === 'string') this.chars += (m[k] as string).length;
      if (Array.isArray(m.tool_calls)) {
        for (const t of m.tool_calls as Obj[]) {
          const f = t.function as { name?: unknown; arguments?: unknown } | undefined;
          if (typeof f?.name === 'string') this.chars += f.name.length;
          if (typeof f?.arguments === 'string') this.chars += f.arguments.length;
        }
      }
      if (this.chars > before) this.pieces++;
    }
  }
}

/**
 * The chunks that end a stream: the usage, and with one choice the finish_reason. Held until the usage is
 * recorded (with several choices, one finishing says nothing of the others: only the usage is held; `[DONE]`
 * always comes after the record).
 */
function isTail(o: Obj, choices: number): boolean {
  if (o.usage) return true;
  return choices <= 1 && Array.isArray(o.choices) && (o.choices as Obj[]).some((c) => c.finish_reason != null);
}

export class ChatRunner {
  constructor(private readonly d: ChatRunDeps) {}

  /** stream false: the completion. */
  async json(p: PreparedChat, signal: AbortSignal): Promise<Obj> {
    const hold = await this.admit(p);
    try {
      return await this.jsonHeld(p, signal, hold);
    } finally {
      hold?.release();
    }
  }

  private async jsonHeld(p: PreparedChat, signal: AbortSignal, hold: Hold | undefined): Promise<Obj> {
    const meter = new Meter();
    const facts = p.facts;
    let answer: Obj;
    let stopped = false;
    facts?.engineStarted();
    try {
      if (p.forward) {
        // one answer, whole: it cannot be stopped midway (its charge stops at the reservation)
        answer = await this.forwardJson(p, signal);
        facts?.firstOutput();
        meter.see(answer);
      } else {
        const chunks: Obj[] = [];
        for await (const c of this.generate(p, signal, meter)) {
          if (chunks.length === 0) facts?.firstOutput();
          const shown = meter.mark();
          meter.see(c);
          if (hold && meter.over(hold.outputLimit)) {
            meter.back(shown);
            // past what it reserved: ended as at the token cap, without this piece
            chunks.push(...finishChunks(c, p, 1));
            stopped = true;
            break;
          }
          chunks.push(c);
        }
        answer = foldChunks(chunks);
      }
      facts?.engineEnded();
    } catch (e) {
      // the client left: what the engine produced is charged
      if (signal.aborted) await this.chargeLeft(p, meter, hold);
      else facts?.failed(e);
      throw this.refused(e, signal);
    }
    const counted = await this.record(p, meter, hold);
    if (stopped) answer.usage = usageObject(counted);
    return this.present(p, answer)!;
  }

  /**
   * Reserves the worst case (the conversation as counted, n times the most output it may produce, at the model's
   * price) before the engine is called: refused with 429 saying the reservation. Nothing when no budget or TPM
   * limit applies to the key.
   */
  private async admit(p: PreparedChat): Promise<Hold | undefined> {
    const a = this.d.admission;
    if (!a || !a.applies(p.key)) return undefined;
    const input = await p.engine.countTokens(p.count());
    const max = p.req.max_completion_tokens ?? p.req.max_tokens ?? undefined;
    const output = a.outputCap(max, input, p.engine.contextWindow ?? p.spec.context_window) * Math.max(1, p.req.n ?? 1);
    return a.reserve(p.key, p.spec, input, output);
  }

  /**
   * stream true: the chunks. Nothing comes out before the engine's first output, so a request the engine
   * refuses at once makes the first read throw (a plain HTTP error). The tail (finish_reason, usage) comes out
   * after the usage is recorded.
   */
  async *stream(p: PreparedChat, signal: AbortSignal): AsyncGenerator<Obj> {
    const hold = await this.admit(p);
    try {
      yield* this.streamHeld(p, signal, hold);
    } finally {
      hold?.release();
    }
  }

  private async *streamHeld(p: PreparedChat, signal: AbortSignal, hold: Hold | undefined): AsyncGenerator<Obj> {
    const meter = new Meter();
    let stopped: Obj[] | undefined;
    const held: Obj[] = [];
    let started = false;
    let ended = false;
    let charged = false;
    const facts = p.facts;
    facts?.engineStarted();
    try {
      const source = p.forward ? this.forwardChunks(p, signal) : this.generate(p, signal, meter);
      for await (const chunk of source) {
        facts?.firstOutput();
        const shown = meter.mark();
        meter.see(chunk);
        if (hold && !held.length && meter.over(hold.outputLimit)) {
          meter.back(shown);
          // past what it reserved (an upstream that ignores max_tokens, a request that named none): this piece is
          // not sent, every choice ends as at the token cap, the upstream is closed (the loop's end)
          stopped = finishChunks(chunk, p, p.req.n ?? 1);
          break;
        }
        if (held.length || isTail(chunk, p.req.n ?? 1)) {
          held.push(chunk);
          continue;
        }
        const out = this.present(p, chunk);
        started = true;
        if (out) yield out;
      }
      ended = true;
      facts?.engineEnded();
    } catch (e) {
      // the client left, or the engine failed: what was produced is charged
      charged = true;
      if (!signal.aborted) facts?.failed(e);
      if (started || meter.chars > 0 || signal.aborted) await this.chargeLeft(p, meter, hold);
      throw this.refused(e, signal);
    } finally {
      // the consumer stopped reading before the end (the route never does: it reads to the end or to an error)
      if (!ended && !charged && meter.chars > 0) void this.chargeLeft(p, meter, hold);
    }
    const counted = await this.record(p, meter, hold);
    if (stopped) {
      for (const c of stopped) yield this.present(p, c)!;
      if (p.includeUsage) yield { id: stopped[0]!.id, object: 'chat.completion.chunk', created: stopped[0]!.created, model: p.spec.name, choices: [], usage: usageObject(counted) };
      return;
    }
    for (const c of held) {
      const out = this.present(p, c);
      if (out) yield out;
    }
  }

  /** an engine's failure as the client's error (a failure caused by the client leaving stays as it is) */
  private refused(e: unknown, signal: AbortSignal): unknown {
    if (signal.aborted) return e;
    return fromEngineError(e);
  }

  // ---------------------------------------------------------------- forward

  private async forwardJson(p: PreparedChat, signal: AbortSignal): Promise<Obj> {
    for await (const o of p.engine.chatCompletions!({ body: p.forward!, signal, route: p.route })) return o;
    throw new EngineError('the upstream sent no answer', 'upstream_error', 502);
  }

  private forwardChunks(p: PreparedChat, signal: AbortSignal): AsyncIterable<Obj> {
    return p.engine.chatCompletions!({ body: p.forward!, signal, route: p.route });
  }

  // ---------------------------------------------------------------- generate

  /**
   * The engine's events as OpenAI's chunks: role first (after the engine's first event), deltas, then the finish
   * chunk and the usage chunk. The engine's cache writes, which that chunk has no place for, are told to `meter`.
   */
  private async *generate(p: PreparedChat, signal: AbortSignal, meter: Meter): AsyncGenerator<Obj> {
    const created = Math.floor(Date.now() / 1000);
    // every chunk names the model the client sent, whatever the engine calls it (docs/models.md)
    const model = p.spec.name;
    const chunk = (delta: Obj, finish: string | null = null): Obj => ({
      id: p.id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      usage: null,
    });
    const it = p.engine.generate({ ...p.gen!, signal })[Symbol.asyncIterator]();
    const calls = new Map<string, number>();
    let first = true;
    try {
      for (;;) {
        const r: IteratorResult<GenerateEvent> = await it.next();
        if (r.done) throw new EngineError('the model engine ended without finishing the answer', 'engine_error', 502);
        const e = r.value;
        // an engine may finish normally after an abort (with the usage so far): the abort wins
        if (signal.aborted && e.type !== 'done') throw signal.reason ?? new Error('aborted');
        if (first) {
          first = false;
          yield chunk({ role: 'assistant', content: '', refusal: null });
        }
        switch (e.type) {
          case 'text_delta':
            if (e.delta) yield chunk({ content: e.delta });
            break;
          case 'reasoning_delta':
            if (e.delta) yield chunk({ reasoning_content: e.delta });
            break;
          case 'tool_call_start': {
            const index = calls.size;
            calls.set(e.callId, index);
            yield chunk({ tool_calls: [{ index, id: e.callId, type: 'function', function: { name: e.name, arguments: '' } }] });
            break;
          }
          case 'tool_call_delta':
            if (e.delta) yield chunk({ tool_calls: [{ index: calls.get(e.callId) ?? 0, function: { arguments: e.delta } }] });
            break;
          case 'tool_call_end':
            break;
          case 'done': {
            const u = e.usage;
            if (u.cacheWriteTokens !== undefined)
              meter.writes = { cacheWriteTokens: u.cacheWriteTokens, ...(u.cacheWrite1hTokens !== undefined ? { cacheWrite1hTokens: u.cacheWrite1hTokens } : {}) };
            const usage = {
              prompt_tokens: u.inputTokens,
              completion_tokens: u.outputTokens,
              total_tokens: u.inputTokens + u.outputTokens,
              prompt_tokens_details: { cached_tokens: u.cachedTokens ?? 0, audio_tokens: 0 },
              completion_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
            };
            if (signal.aborted) {
              // charged as the engine counted, then the abort
              yield { id: p.id, object: 'chat.completion.chunk', created, model, choices: [], usage };
              throw signal.reason ?? new Error('aborted');
            }
            yield chunk({}, e.finishReason);
            yield { id: p.id, object: 'chat.completion.chunk', created, model, choices: [], usage };
            return;
          }
        }
      }
    } finally {
      void Promise.resolve(it.return?.()).catch(() => {});
    }
  }

  // ---------------------------------------------------------------- the client's view

  /**
   * A chunk or completion as the client sees it: the model named by the client's name, whatever the upstream
   * calls it; the usage only where the client asked for it (a stream without
   * include_usage has no usage field and no usage chunk).
   */
  private present(p: PreparedChat, o: Obj): Obj | undefined {
    let out = o;
    if (typeof out.model === 'string' && out.model !== p.spec.name) out = { ...out, model: p.spec.name };
    if (p.stream && !p.includeUsage && 'usage' in out) {
      if (Array.isArray(out.choices) && out.choices.length === 0) return undefined;
      const { usage: _drop, ...rest } = out;
      void _drop;
      out = rest;
    }
    return out;
  }

  // ---------------------------------------------------------------- usage

  /** Records the usage: the engine's, or an estimate when it gave none; `hold`: settled by this record. */
  private async record(p: PreparedChat, meter: Meter, hold?: Hold): Promise<Counted> {
    const counted = meter.usage ?? (await this.estimate(p, meter));
    await this.d.metering.charge({
      requestId: p.requestId,
      key: p.key,
      spec: p.spec,
      operation: CHAT_OPERATION,
      used: counted,
      deployment: p.route.deployment,
      hold,
      facts: p.facts,
    });
    return counted;
  }

  private async estimate(p: PreparedChat, meter: Meter): Promise<Counted> {
    const input = await Promise.resolve()
      .then(() => p.engine.countTokens(p.count()))
      .catch(() => 0);
    return { inputTokens: input, outputTokens: meter.chars > 0 ? Math.max(1, Math.ceil(meter.chars / 4)) : 0 };
  }

  /** The client left or the engine failed mid-way: charge what was produced; a failure to record is logged, not thrown. */
  private async chargeLeft(p: PreparedChat, meter: Meter, hold?: Hold): Promise<void> {
    if (!meter.usage && meter.chars === 0) return;
    await this.record(p, meter, hold).catch((e) =>
      this.d.log.error({ err: (e as Error).message, requestId: p.requestId }, 'usage of a chat completion that ended early not recorded'),
    );
  }
}

/** The chunks that end every choice as at the token cap (finish_reason "length"), in the shape of `like`. */
function finishChunks(like: Obj, p: PreparedChat, n: number): Obj[] {
  return Array.from({ length: Math.max(1, n) }, (_, index) => ({
    id: like.id ?? p.id,
    object: 'chat.completion.chunk',
    created: like.created ?? Math.floor(Date.now() / 1000),
    model: p.spec.name,
    choices: [{ index, delta: {}, logprobs: null, finish_reason: 'length' }],
    ...(p.stream ? {} : { usage: null }),
  }));
}

/** A count as OpenAI's usage object. */
function usageObject(u: Counted): Obj {
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens ?? 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

/** Generated chunks (one choice) folded into the chat.completion object. */
export function foldChunks(chunks: Obj[]): Obj {
  const head = chunks[0] ?? {};
  let content = '';
  let reasoning = '';
  let finish: unknown = null;
  let usage: unknown;
  const calls: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }> = [];
  let model = head.model;
  for (const c of chunks) {
    if (c.model) model = c.model;
    if (c.usage) usage = c.usage;
    for (const ch of (c.choices as Obj[] | undefined) ?? []) {
      const d = (ch.delta ?? {}) as Obj;
      if (typeof d.content === 'string') content += d.content;
      if (typeof d.reasoning_content === 'string') reasoning += d.reasoning_content;
      for (const t of (d.tool_calls as Array<{ index: number; id?: string; function?: { name?: string; arguments?: string } }> | undefined) ?? []) {
        const call = (calls[t.index] ??= { id: t.id ?? '', type: 'function', function: { name: '', arguments: '' } });
        if (t.id) call.id = t.id;
        if (t.function?.name) call.function.name = t.function.name;
        if (t.function?.arguments) call.function.arguments += t.function.arguments;
      }
      if (ch.finish_reason != null) finish = ch.finish_reason;
    }
  }
  const message: Obj = { role: 'assistant', content: content || (calls.length ? null : ''), refusal: null, annotations: [] };
  if (reasoning) message.reasoning_content = reasoning;
  if (calls.length) message.tool_calls = calls;
  const out: Obj = { id: head.id, object: 'chat.completion', created: head.created, model, choices: [{ index: 0, message, logprobs: null, finish_reason: finish }] };
  if (usage) out.usage = usage;
  return out;
}
