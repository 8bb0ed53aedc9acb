/**
 * Running a prepared message: the engine's events (GenerateEvent) as Anthropic's stream events (message_start,
 * ping, content_block_start/delta/stop, message_delta, message_stop), sent as they come or folded into the
 * message object. As for chat completions: the request is admitted by a reservation of its worst case, charged
 * from the engine's usage before the client gets the end of the answer (message_delta is held until the usage
 * is recorded), stopped as at max_tokens past what it reserved, and a client that leaves, or a failure after
 * output started, is charged what was produced (estimated when the engine could not say).
 */
import type { FastifyBaseLogger } from 'fastify';
import type { FinishReason, GenerateEvent, Usage } from '../engines/types.js';
import { EngineError } from '../engines/types.js';
import type { Metering } from '../api/metering.js';
import { fromEngineError } from '../api/engine-errors.js';
import { OutputCount, type Admission, type Hold } from '../api/admission.js';
import type { PreparedMessage } from './prepare.js';
import { cacheCounts, copyCacheCounts, type CacheCounts } from '../engines/shared/usage.js';

export type Obj = Record<string, unknown>;

/** the usage operation of a message of the Messages API (declared by the module) */
export const MESSAGES_OPERATION = 'anthropic.messages';

export interface MessagesRunDeps {
  metering: Metering;
  log: FastifyBaseLogger;
  admission?: Admission;
}

/** Anthropic's stop reasons for the engines' finish reasons */
const STOP: Record<FinishReason, string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use', content_filter: 'refusal' };

/**
 * Anthropic's usage object: input_tokens are the tokens neither read from a cache nor written to one, as Anthropic
 * counts them; the writes are `cache_creation_input_tokens`, split by the cache's lifetime in `cache_creation` when
 * the engine counted them.
 */
export function usageObject(u: Usage): Obj {
  const part = (n: number | undefined, most: number) => Math.max(0, Math.min(n ?? 0, most));
  const cached = part(u.cachedTokens, u.inputTokens);
  const written = part(u.cacheWriteTokens, u.inputTokens - cached);
  const written1h = part(u.cacheWrite1hTokens, written);
  return {
    input_tokens: u.inputTokens - cached - written,
    cache_creation_input_tokens: written,
    cache_read_input_tokens: cached,
    ...(u.cacheWriteTokens !== undefined ? { cache_creation: { ephemeral_5m_input_tokens: written - written1h, ephemeral_1h_input_tokens: written1h } } : {}),
    output_tokens: u.outputTokens,
    ...(u.reasoningTokens !== undefined ? { output_tokens_details: { thinking_tokens: u.reasoningTokens } } : {}),
    service_tier: 'standard',
  };
}

export class MessagesRunner {
  constructor(private readonly d: MessagesRunDeps) {}

  /** stream false: the message object, folded from the events (forwarded: the upstream's own) */
  async json(p: PreparedMessage, signal: AbortSignal): Promise<Obj> {
    if (p.forward) {
      const hold = await this.admit(p);
      try {
        return await this.forwardJson(p, signal, hold);
      } finally {
        hold?.release();
      }
    }
    let message: Obj | undefined;
    for await (const e of this.stream(p, signal)) message = fold(message, e);
    return message!;
  }

  /**
   * stream true: the events. Nothing comes out before the engine's first event, so a request the engine refuses
   * at once makes the first read throw (a plain HTTP error, in Anthropic's shape).
   */
  async *stream(p: PreparedMessage, signal: AbortSignal): AsyncGenerator<Obj> {
    const hold = await this.admit(p);
    try {
      yield* p.forward ? this.forwardEvents(p, signal, hold) : this.events(p, signal, hold);
    } finally {
      hold?.release();
    }
  }

  /** Reserves the worst case (the conversation as counted, max_tokens of output, at the model's price): 429 when refused. */
  private async admit(p: PreparedMessage): Promise<Hold | undefined> {
    const a = this.d.admission;
    if (!a || !a.applies(p.key)) return undefined;
    const input = await p.engine.countTokens(p.count);
    const output = a.outputCap(p.maxTokens, input, p.engine.contextWindow ?? p.spec.context_window);
    return a.reserve(p.key, p.spec, input, output);
  }

  private async *events(p: PreparedMessage, signal: AbortSignal, hold: Hold | undefined): AsyncGenerator<Obj> {
    const facts = p.facts;
    const shown = new OutputCount();
    let usage: Usage | undefined;
    let ended = false;
    let charged = false;
    facts?.engineStarted();
    const it = p.engine.generate({ ...p.gen!, signal })[Symbol.asyncIterator]();
    // the open block: its index and kind; a tool call's id and the argument text sent so far
    let index = -1;
    let open: { kind: 'text' | 'thinking' | 'tool_use'; callId?: string; sent: string } | undefined;
    const close = (): Obj | undefined => {
      if (!open) return undefined;
      open = undefined;
      return { type: 'content_block_stop', index };
    };
    const start = (kind: 'text' | 'thinking' | 'tool_use', block: Obj, callId?: string): Obj[] => {
      const out: Obj[] = [];
      const c = close();
      if (c) out.push(c);
      index++;
      open = { kind, callId, sent: '' };
      out.push({ type: 'content_block_start', index, content_block: block });
      return out;
    };
    let finish: FinishReason = 'stop';
    let stopped = false;
    try {
      let r = await it.next();
      facts?.firstOutput();
      yield {
        type: 'message_start',
        message: {
          id: p.id,
          type: 'message',
          role: 'assistant',
          model: p.spec.name,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: hold?.inputTokens ?? 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0, service_tier: 'standard' },
        },
      };
      yield { type: 'ping' };
      for (; !r.done; r = await it.next()) {
        const e: GenerateEvent = r.value;
        // an engine may finish normally after an abort (with the usage so far): the abort wins, once that usage is known
        if (signal.aborted) {
          if (e.type === 'done') usage = e.usage;
          throw signal.reason ?? new Error('aborted');
        }
        if (e.type === 'done') {
          usage = e.usage;
          finish = e.finishReason;
          break;
        }
        const text = e.type === 'text_delta' || e.type === 'reasoning_delta' || e.type === 'tool_call_delta' ? e.delta : e.type === 'tool_call_start' ? e.name : '';
        if (shown.add(text, hold?.outputLimit ?? Infinity)) {
          // past what it reserved: ended as at max_tokens, without this piece (the engine is closed: the loop's end)
          finish = 'length';
          stopped = true;
          break;
        }
        switch (e.type) {
          case 'text_delta':
            if (!e.delta) break;
            if (open?.kind !== 'text') yield* start('text', { type: 'text', text: '' });
            yield { type: 'content_block_delta', index, delta: { type: 'text_delta', text: e.delta } };
            break;
          case 'reasoning_delta':
            if (!e.delta) break;
            if (open?.kind !== 'thinking') yield* start('thinking', { type: 'thinking', thinking: '', signature: '' });
            yield { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: e.delta } };
            break;
          case 'tool_call_start':
            yield* start('tool_use', { type: 'tool_use', id: e.callId, name: e.name, input: {} }, e.callId);
            break;
          case 'tool_call_delta':
            if (!e.delta || open?.callId !== e.callId) break;
            open.sent += e.delta;
            yield { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: e.delta } };
            break;
          case 'tool_call_end': {
            // an engine that gives the arguments only at the end: what was not streamed goes as one delta
            if (open?.callId === e.callId && e.arguments.startsWith(open.sent) && e.arguments.length > open.sent.length) {
              yield { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: e.arguments.slice(open.sent.length) } };
            }
            const c = close();
            if (c) yield c;
            break;
          }
        }
      }
      if (!usage && !stopped) throw new EngineError('the model engine ended without finishing the answer', 'engine_error', 502);
      ended = true;
      facts?.engineEnded();
    } catch (e) {
      charged = true;
      if (!signal.aborted) facts?.failed(e);
      if (usage || shown.chars > 0 || signal.aborted) await this.chargeLeft(p, usage, shown, hold);
      throw signal.aborted ? e : fromEngineError(e);
    } finally {
      void Promise.resolve(it.return?.()).catch(() => {});
      if (!ended && !charged && (usage || shown.chars > 0)) void this.chargeLeft(p, usage, shown, hold);
    }
    const c = close();
    if (c) yield c;
    const counted = usage ?? (await this.estimate(p, shown));
    await this.record(p, counted, hold);
    yield {
      type: 'message_delta',
      delta: { stop_reason: STOP[finish], stop_sequence: null },
      usage: usageObject(counted),
    };
    yield { type: 'message_stop' };
  }

  // ---------------------------------------------------------------- forwarded

  /** One answer forwarded: the upstream's message as it wrote it (the model named as the client named it), charged from its usage. */
  private async forwardJson(p: PreparedMessage, signal: AbortSignal, hold: Hold | undefined): Promise<Obj> {
    const facts = p.facts;
    facts?.engineStarted();
    let answer: Obj | undefined;
    try {
      for await (const o of p.engine.messages!({ body: p.forward!, betas: p.betas, signal, route: p.route })) {
        answer = o;
        break;
      }
      if (!answer) throw new EngineError('the upstream sent no answer', 'upstream_error', 502);
      if (signal.aborted) throw signal.reason ?? new Error('aborted');
      facts?.firstOutput();
      facts?.engineEnded();
    } catch (e) {
      if (!signal.aborted) facts?.failed(e);
      const used = answer ? readUsage(undefined, answer.usage) : undefined;
      if (used) await this.chargeLeft(p, used, new OutputCount(), hold);
      throw signal.aborted ? e : fromEngineError(e);
    }
    const used = readUsage(undefined, answer.usage) ?? (await this.estimate(p, outputOf(answer)));
    await this.record(p, used, hold);
    return named(p, answer);
  }

  /**
   * A stream forwarded: the upstream's events as it wrote them (message_start names the model as the client named
   * it). message_delta and message_stop are held until the usage they end with is recorded; past what the request
   * reserved, it ends as at max_tokens (the open block stopped, the upstream closed).
   */
  private async *forwardEvents(p: PreparedMessage, signal: AbortSignal, hold: Hold | undefined): AsyncGenerator<Obj> {
    const facts = p.facts;
    const shown = new OutputCount();
    let usage: Usage | undefined;
    let ended = false;
    let charged = false;
    let first = true;
    let stopped = false;
    const open = new Set<unknown>();
    const held: Obj[] = [];
    facts?.engineStarted();
    const it = p.engine.messages!({ body: p.forward!, betas: p.betas, signal, route: p.route })[Symbol.asyncIterator]();
    try {
      for (let r = await it.next(); !r.done; r = await it.next()) {
        const e = r.value;
        if (first) {
          first = false;
          facts?.firstOutput();
        }
        if (e.type === 'message_start') usage = readUsage(usage, (e.message as Obj | undefined)?.usage);
        else if (e.type === 'message_delta') usage = readUsage(usage, e.usage);
        if (signal.aborted) throw signal.reason ?? new Error('aborted');
        if (e.type === 'content_block_delta') {
          const d = (e.delta ?? {}) as Obj;
          const text = typeof d.text === 'string' ? d.text : typeof d.thinking === 'string' ? d.thinking : typeof d.partial_json === 'string' ? d.partial_json : '';
          if (shown.add(text, hold?.outputLimit ?? Infinity)) {
            stopped = true;
            break;
          }
        }
        if (e.type === 'content_block_start') open.add(e.index);
        else if (e.type === 'content_block_stop') open.delete(e.index);
        if (held.length || e.type === 'message_delta' || e.type === 'message_stop') {
          held.push(e);
          continue;
        }
        yield e.type === 'message_start' ? { ...e, message: named(p, (e.message ?? {}) as Obj) } : e;
      }
      ended = true;
      facts?.engineEnded();
    } catch (e) {
      charged = true;
      if (!signal.aborted) facts?.failed(e);
      if (usage || shown.chars > 0 || signal.aborted) await this.chargeLeft(p, usage, shown, hold);
      throw signal.aborted ? e : fromEngineError(e);
    } finally {
      void Promise.resolve(it.return?.()).catch(() => {});
      if (!ended && !charged && (usage || shown.chars > 0)) void this.chargeLeft(p, usage, shown, hold);
    }
    if (stopped) {
      // what was produced past message_start is at least what was shown
      const counted: Usage = {
        inputTokens: usage?.inputTokens ?? 0,
        outputTokens: Math.max(usage?.outputTokens ?? 0, shown.tokens),
      };
      copyCacheCounts(usage, counted);
      await this.record(p, counted, hold);
      for (const index of open) yield { type: 'content_block_stop', index };
      yield { type: 'message_delta', delta: { stop_reason: 'max_tokens', stop_sequence: null }, usage: usageObject(counted) };
      yield { type: 'message_stop' };
      return;
    }
    await this.record(p, usage ?? (await this.estimate(p, shown)), hold);
    yield* held;
  }

  // ---------------------------------------------------------------- usage

  private async record(p: PreparedMessage, used: Usage, hold?: Hold): Promise<void> {
    await this.d.metering.charge({
      requestId: p.requestId,
      key: p.key,
      spec: p.spec,
      operation: MESSAGES_OPERATION,
      used: { inputTokens: used.inputTokens, outputTokens: used.outputTokens, ...pick(used) },
      deployment: p.route.deployment,
      hold,
      facts: p.facts,
    });
  }

  private async estimate(p: PreparedMessage, shown: OutputCount): Promise<Usage> {
    const input = await Promise.resolve()
      .then(() => p.engine.countTokens(p.count))
      .catch(() => 0);
    return { inputTokens: input, outputTokens: shown.tokens };
  }

  /** The client left or the engine failed mid-way: charge what was produced; a failure to record is logged, not thrown. */
  private async chargeLeft(p: PreparedMessage, usage: Usage | undefined, shown: OutputCount, hold?: Hold): Promise<void> {
    const used = usage ?? (await this.estimate(p, shown));
    await this.record(p, used, hold).catch((e) => this.d.log.error({ err: (e as Error).message, requestId: p.requestId }, 'usage of a message that ended early not recorded'));
  }
}

/** The stream's events folded into the message object, as Anthropic's SDK accumulates them. */
export function fold(message: Obj | undefined, e: Obj): Obj | undefined {
  if (e.type === 'message_start') return { ...(e.message as Obj), content: [] };
  if (!message) return message;
  const content = message.content as Obj[];
  switch (e.type) {
    case 'content_block_start':
      content.push({ ...(e.content_block as Obj), ...((e.content_block as Obj).type === 'tool_use' ? { _json: '' } : {}) });
      break;
    case 'content_block_delta': {
      const b = content[e.index as number]!;
      const d = e.delta as Obj;
      if (d.type === 'text_delta') b.text = (b.text as string) + (d.text as string);
      else if (d.type === 'thinking_delta') b.thinking = (b.thinking as string) + (d.thinking as string);
      else if (d.type === 'input_json_delta') b._json = (b._json as string) + (d.partial_json as string);
      break;
    }
    case 'content_block_stop': {
      const b = content[e.index as number]!;
      if (b.type === 'tool_use') {
        const json = b._json as string;
        delete b._json;
        b.input = parseInput(json);
      }
      break;
    }
    case 'message_delta': {
      const d = e.delta as Obj;
      message.stop_reason = d.stop_reason;
      message.stop_sequence = d.stop_sequence;
      message.usage = e.usage;
      break;
    }
  }
  return message;
}

/** a tool call's argument text as its input object (an empty text is no arguments; text cut short is kept whole where it parses) */
function parseInput(json: string): unknown {
  if (json.trim() === '') return {};
  try {
    const v: unknown = JSON.parse(json);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : { value: v };
  } catch {
    return {};
  }
}

/** a forwarded message with the model named as the client named it */
function named(p: PreparedMessage, m: Obj): Obj {
  return typeof m.model === 'string' && m.model !== p.spec.name ? { ...m, model: p.spec.name } : m;
}

/**
 * Anthropic's usage object (message_start's, message_delta's, an answer's) as the engines' Usage, over what was
 * known: every input token (cache reads and writes included) is input, cache reads the cached part, cache writes
 * the written part (`cache_creation.ephemeral_1h_input_tokens` of them to the one-hour cache); a count that is
 * absent or null keeps the one known before (message_delta repeats the counts it knows).
 */
export function readUsage(prev: Usage | undefined, u: unknown): Usage | undefined {
  if (!u || typeof u !== 'object') return prev;
  const o = u as Obj;
  const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
  const input = num(o.input_tokens);
  const read = num(o.cache_read_input_tokens);
  const write = num(o.cache_creation_input_tokens);
  const output = num(o.output_tokens);
  const anyInput = input !== undefined || read !== undefined || write !== undefined;
  if (!anyInput && output === undefined) return prev;
  const usage: Usage = {
    inputTokens: anyInput ? (input ?? 0) + (read ?? 0) + (write ?? 0) : (prev?.inputTokens ?? 0),
    outputTokens: output ?? prev?.outputTokens ?? 0,
  };
  const c = o.cache_creation as Obj | null | undefined;
  // message_delta repeats the writes without their split: the split known before stays
  const write1h = num(c && typeof c === 'object' ? c.ephemeral_1h_input_tokens : undefined) ?? prev?.cacheWrite1hTokens;
  if (anyInput) Object.assign(usage, cacheCounts(read, write, write1h));
  else copyCacheCounts(prev, usage);
  return usage;
}

/** the output of a forwarded message that came without usage, counted as shown output for an estimate */
function outputOf(m: Obj): OutputCount {
  const c = new OutputCount();
  for (const b of Array.isArray(m.content) ? (m.content as Obj[]) : []) {
    const t = typeof b?.text === 'string' ? b.text : typeof b?.thinking === 'string' ? b.thinking : b?.input !== undefined ? JSON.stringify(b.input) : '';
    c.add(t, Infinity);
  }
  return c;
}

/** the cache counts a usage has */
function pick(u: Usage): CacheCounts {
  const out: CacheCounts = {};
  copyCacheCounts(u, out);
  return out;
}
