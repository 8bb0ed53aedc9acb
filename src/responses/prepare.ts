/**
 * Everything decided before any output: the model and its engine, tools and formats, the conversation rebuilt
 * from the stored chain, and the context window. A request that gets through `prepare` is valid.
 */
import { AppError, msg, type ErrorCode } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { ChatMessage, GenerateRequest, TextEngine, TextFormat, ToolChoice } from '../engines/types.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import { resolveEngine, resolveModel } from '../api/metering.js';
import type { Hold } from '../api/admission.js';
import { checkCallOutputs, expandReasoningContent, largeInput, normalizeInput, normalizeInputInTurns, rawIndexOf, toChatMessages, type StoredItem } from './input.js';
import { initialResponse, normalizedTools, outputAsItems, type ResponseObject } from './object.js';
import type { ChainLink, ResponseStore } from './store.js';
import type { ChainLoads } from './chain-loads.js';
import type { CreateResponseRequest } from './schemas.js';
import { newId } from './ids.js';
import type { Sealer } from './seal.js';
import { compactionParams, openCompactions } from './compaction.js';
import { audioOutputOf, type AnswerSpeaker, type AudioOutput } from './speech.js';

/** A valid request, ready to run. */
export interface Prepared {
  id: string;
  req: CreateResponseRequest;
  key: KeyPrincipal;
  requestId: string;
  spec: ModelSpec;
  engine: TextEngine;
  inputItems: StoredItem[];
  /** the conversation before this input (the chain of previous_response_id), as stored */
  history: StoredItem[];
  gen: GenerateRequest;
  response: ResponseObject;
  store: boolean;
  /** modalities audio: the answer is spoken too, in this voice and format */
  audio?: AudioOutput;
  /** the request's facts (model, deployment, engine time, tokens, failure) when it runs in an HTTP request */
  facts?: RequestFacts;
  /** what it reserved at admission (set by Runner.execute when billing or a TPM limit applies) */
  hold?: Hold;
}

export interface PrepareDeps {
  store: ResponseStore;
  models: ModelRegistry;
  engines: TextEngineSource;
  /** opens compaction items (./seal.ts); without it they are refused */
  sealer?: Sealer;
  speaker?: AnswerSpeaker;
  /** what a continuation may read of its stored conversation (RESPONSES_MAX_CHAIN_BYTES), and the per-key bound on reading it */
  chain?: { maxBytes: number; loads?: ChainLoads };
}

/** RESPONSES_MAX_CHAIN_BYTES's default (platform/config.ts) */
export const DEFAULT_MAX_CHAIN_BYTES = 64 * 1024 * 1024;
/** earlier responses a chain is followed back through (the recursive CTE's depth cap) */
const MAX_CHAIN_DEPTH = 1000;
/**
 * With a known context window, a chain is read newest first in parts: the first of about this many bytes per token
 * of the window (at least 1 MiB), each next one twice the last, until the turns read pass the window. Text takes
 * 3-5 bytes of stored JSON per estimated token, so a conversation that fits is read in one part, as before.
 */
const FIRST_PART_BYTES_PER_TOKEN = 8;
const MIN_FIRST_PART_BYTES = 1024 * 1024;

/** How the stored conversation of a continuation is read (Preparer.readHistory). */
export interface HistoryOptions {
  /** the bytes of the new input, counted with the chain against RESPONSES_MAX_CHAIN_BYTES */
  inputBytes?: number;
  /** disabled: a chain over the byte cap is a 400; auto: its oldest turns are dropped */
  truncation?: 'auto' | 'disabled';
  /** whether these newest turns (with the new input) already pass the model's context window: older ones are then not read */
  pastWindow?: (history: StoredItem[]) => Promise<boolean>;
  /** the model's context window (tokens), with pastWindow: what the first part read is sized by */
  window?: number;
  /** a background job waits for a load slot of its key; a request waits in a bounded queue (429 past it) */
  queue?: 'bounded' | 'unbounded';
}

/** A continuation's stored conversation, as far as it was read. */
export interface History {
  items: StoredItem[];
  /** older turns were left out: dropped (the byte cap, truncation auto) or not read (past the context window) */
  partial: boolean;
}

/** What a transport knows that storage may not: the WebSocket mode's connection-local memory (./ws). */
export interface PrepareContext {
  /** the history of `previous_response_id`, when the caller holds it (then storage is not read) */
  history?: StoredItem[];
  /** the HTTP request's facts, filled as the response runs in it (req.facts) */
  facts?: RequestFacts;
}

/** A background job prepares again on the instance that runs it, keeping the id, input and response it was stored with. */
export interface Existing {
  id: string;
  inputItems: StoredItem[];
  response: ResponseObject;
}

const bad = (message: string, param: string | null = null, code: ErrorCode = 'validation_error') => new AppError(code, message, param);

export class Preparer {
  constructor(private readonly d: PrepareDeps) {}

  async prepare(req: CreateResponseRequest, key: KeyPrincipal, requestId: string, existing?: Existing, ctx: PrepareContext = {}): Promise<Prepared> {
    const facts = ctx.facts;
    const spec = resolveModel(this.d.models, req.model, 'text', key, facts);
    if (req.background && req.store === false) throw bad('background mode requires store to be true', 'store');
    const tools = normalizedTools(req);
    tools.forEach((t, i) => {
      const raw = req.tools![i]!;
      if (raw.type !== 'function') throw bad(`tools[${i}].type: only "function" tools are supported (got ${JSON.stringify(raw.type)})`, `tools[${i}].type`);
      if (typeof t.name !== 'string' || !/^[A-Za-z0-9_.:-]{1,128}$/.test(t.name))
        throw bad(`tools[${i}].name is required (letters, digits, _ . : -; at most 128)`, `tools[${i}].name`);
      if (t.parameters !== null && (typeof t.parameters !== 'object' || Array.isArray(t.parameters)))
        throw bad(`tools[${i}].parameters must be a JSON Schema object`, `tools[${i}].parameters`);
    });
    const names = new Set(tools.map((t) => t.name as string));
    if (names.size !== tools.length) throw bad('tools: function names must be unique', 'tools');
    let toolChoice: ToolChoice | undefined;
    const tc = req.tool_choice;
    if (typeof tc === 'string') toolChoice = tc;
    else if (tc) {
      if (tc.type !== 'function') throw bad(`tool_choice.type must be "function" (got ${JSON.stringify(tc.type)})`, 'tool_choice.type');
      const name = tc.name ?? (tc.function as { name?: string } | undefined)?.name;
      if (!name) throw bad('tool_choice.name is required', 'tool_choice.name');
      if (!names.has(name)) throw bad(`tool_choice names "${name}", which is not among the tools`, 'tool_choice.name');
      toolChoice = { type: 'function', name };
    }
    if ((toolChoice === 'required' || typeof toolChoice === 'object') && tools.length === 0) throw bad(`tool_choice ${JSON.stringify(tc)} needs at least one tool`, 'tool_choice');
    let format: TextFormat | undefined;
    const f = req.text?.format;
    if (f?.type === 'json_schema') {
      if (!f.name) throw bad('text.format.name is required for json_schema', 'text.format.name');
      if (!f.schema) throw bad('text.format.schema is required for json_schema', 'text.format.schema');
      format = { type: 'json_schema', name: f.name, schema: f.schema as Record<string, unknown>, strict: f.strict ?? undefined, description: f.description };
    } else if (f?.type === 'json_object') format = { type: 'json_object' };
    const stop = req.stop == null ? undefined : typeof req.stop === 'string' ? [req.stop] : req.stop;
    const audio = audioOutputOf(req.modalities, req.audio, this.d.speaker);

    const inputItems = existing?.inputItems ?? expandReasoningContent(req.input, largeInput(req.input) ? await normalizeInputInTurns(req.input) : normalizeInput(req.input));
    const seenInput = await openCompactions(inputItems, key.userId, this.d.sealer, compactionParams(req.input, inputItems));
    const engine = await resolveEngine(() => this.d.engines.text(spec), facts);
    const window = engine.contextWindow ?? spec.context_window;
    const engineTools = tools.map((t) => ({
      name: t.name as string,
      description: (t.description as string | null) ?? undefined,
      parameters: (t.parameters as Record<string, unknown> | null) ?? undefined,
      strict: (t.strict as boolean | null) ?? undefined,
    }));
    const truncation = req.truncation ?? 'disabled';
    const count = (m: ChatMessage[]) => engine.countTokens({ model: upstreamName(spec), messages: m, tools: engineTools.length ? engineTools : undefined });
    const openHistory = (h: StoredItem[]) => openCompactions(h, key.userId, this.d.sealer, () => 'previous_response_id');
    let chain: History = { items: ctx.history ?? [], partial: false };
    if (!ctx.history && req.previous_response_id) {
      chain = await this.readHistory(req.previous_response_id, key, {
        inputBytes: jsonBytes(inputItems),
        truncation,
        queue: existing ? 'unbounded' : 'bounded',
        window,
        // only what the model can read is read: once the newest turns pass the window, older ones would be dropped
        // (auto) or the request refused (disabled) whatever they hold
        pastWindow: window ? async (h) => (await count(toChatMessages(req.instructions, [...(await openHistory(h)), ...seenInput]))) > window : undefined,
      });
    }
    const history = chain.items;
    const outputAt = rawIndexOf(req.input, inputItems, 'function_call_output');
    // a call answered here may be in the turns left out
    if (!chain.partial) {
      checkCallOutputs(history, inputItems, (i) => {
        const k = outputAt(i);
        return k === undefined ? 'input' : `input[${k}].call_id`;
      });
    }
    let messages = toChatMessages(req.instructions, [...(await openHistory(history)), ...seenInput]);
    if (window) messages = await this.fit(count, spec, messages, window, truncation, chain.partial);

    const id = existing?.id ?? newId('resp');
    const gen: GenerateRequest = {
      model: upstreamName(spec),
      messages,
      tools: toolChoice === 'none' ? undefined : engineTools.length ? engineTools : undefined,
      toolChoice: engineTools.length ? (toolChoice ?? 'auto') : undefined,
      parallelToolCalls: req.parallel_tool_calls ?? true,
      format,
      temperature: req.temperature ?? undefined,
      topP: req.top_p ?? undefined,
      maxOutputTokens: req.max_output_tokens ?? undefined,
      stop,
      presencePenalty: req.presence_penalty ?? undefined,
      frequencyPenalty: req.frequency_penalty ?? undefined,
      maxToolCalls: req.max_tool_calls ?? undefined,
      reasoningEffort: req.reasoning?.effort ?? undefined,
      cacheKey: req.previous_response_id ?? undefined,
      saveKey: id,
      route: {},
    };
    if (facts) facts.route = gen.route;
    const createdAt = Math.floor(Date.now() / 1000);
    const response = existing?.response ?? initialResponse(req, id, createdAt, 'in_progress');
    return { id, req, key, requestId, spec, engine, inputItems, history, gen, response, store: req.store ?? true, ...(audio ? { audio } : {}), ...(facts ? { facts } : {}) };
  }

  /** The stored conversation of a previous response (its chain's input items and outputs), the owner's only. */
  async history(previousResponseId: string, key: KeyPrincipal, opts: HistoryOptions = {}): Promise<StoredItem[]> {
    return (await this.readHistory(previousResponseId, key, opts)).items;
  }

  /**
   * The stored conversation of a previous response, read within its bounds (issue 22 §3): the chain is measured
   * first, in SQL (chainSizes: the sizes written with each row, nothing else leaves the database); a chain that
   * with the new input passes RESPONSES_MAX_CHAIN_BYTES is refused before any of it is read (truncation
   * disabled) or loses its oldest turns (auto); then the turns are read newest first, in parts, only until they
   * pass the model's context window. Every read runs in one of the key's chain-load slots (./chain-loads.ts).
   */
  async readHistory(previousResponseId: string, key: KeyPrincipal, opts: HistoryOptions = {}): Promise<History> {
    const read = () => this.readChain(previousResponseId, key, opts);
    const loads = this.d.chain?.loads;
    return loads ? loads.run(key.keyId, read, opts.queue) : read();
  }

  private async readChain(previousResponseId: string, key: KeyPrincipal, opts: HistoryOptions): Promise<History> {
    const store = this.d.store;
    const maxBytes = this.d.chain?.maxBytes ?? DEFAULT_MAX_CHAIN_BYTES;
    const inputBytes = opts.inputBytes ?? 0;
    const notFound = () => new AppError('previous_response_not_found', `Previous response with id '${previousResponseId}' not found.`, 'previous_response_id');
    // newest first; the walk stops at the first response past what the cap leaves for the chain
    const links = await store.chainSizes(previousResponseId, key.userId, Math.max(0, maxBytes - inputBytes), MAX_CHAIN_DEPTH);
    const newest = links[0];
    if (!newest) throw notFound();
    if (newest.status === 'in_progress' || newest.status === 'queued') {
      throw bad(`Previous response '${previousResponseId}' is still in_progress; wait until it finishes`, 'previous_response_id', 'invalid_state');
    }
    let total = inputBytes;
    let fit = 0;
    while (fit < links.length && total + links[fit]!.bytes <= maxBytes) total += links[fit++]!.bytes;
    let partial = fit < links.length;
    if (partial && opts.truncation !== 'auto') {
      const bytes = links.reduce((n, l) => n + l.bytes, inputBytes);
      throw new AppError('conversation_too_large', msg('chain_too_large', { id: previousResponseId, bytes, max: maxBytes }), 'previous_response_id');
    }
    const kept: ChainLink[] = links.slice(0, fit);
    // the parts read, newest first
    const parts: Array<Array<{ object: ResponseObject; inputItems: StoredItem[] }>> = [];
    const flat = () => {
      const items: StoredItem[] = [];
      for (let p = parts.length - 1; p >= 0; p--) for (const c of parts[p]!) items.push(...c.inputItems, ...outputAsItems(c.object.output));
      return items;
    };
    let budget = opts.pastWindow ? Math.max(MIN_FIRST_PART_BYTES, (opts.window ?? 0) * FIRST_PART_BYTES_PER_TOKEN) : Infinity;
    let i = 0;
    while (i < kept.length) {
      let j = i + 1;
      let bytes = kept[i]!.bytes;
      while (j < kept.length && bytes + kept[j]!.bytes <= budget) bytes += kept[j++]!.bytes;
      const ids = kept.slice(i, j).map((l) => l.id);
      const got = new Map((await store.chainPart([...ids].reverse(), key.userId)).map((c) => [c.id, c]));
      // a response deleted meanwhile ends the chain there, as the walk would have
      const part: Array<{ object: ResponseObject; inputItems: StoredItem[] }> = [];
      let broken = false;
      for (const id of ids) {
        const c = got.get(id);
        if (!c) {
          broken = true;
          break;
        }
        part.unshift(c);
      }
      if (i === 0 && part.length === 0) throw notFound();
      parts.push(part);
      if (broken) break;
      i = j;
      if (i < kept.length && opts.pastWindow && (await opts.pastWindow(flat()))) {
        partial = true;
        break;
      }
      budget *= 2;
    }
    return { items: flat(), partial };
  }

  /** POST /responses/input_tokens: the tokens the input would take (truncation auto: what would be sent). */
  async inputTokens(req: CreateResponseRequest, key: KeyPrincipal): Promise<{ object: 'response.input_tokens'; input_tokens: number }> {
    const p = await this.prepare({ ...req, truncation: 'auto' }, key, 'count');
    const n = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools });
    return { object: 'response.input_tokens', input_tokens: n };
  }

  /**
   * truncation disabled: 400 when the input does not fit; auto: drop the oldest turns (never the instructions).
   * `partial`: older turns of the conversation were not read (they would not fit either): the count is a floor.
   */
  private async fit(
    count: (m: ChatMessage[]) => Promise<number>,
    spec: ModelSpec,
    messages: ChatMessage[],
    window: number,
    truncation: 'auto' | 'disabled',
    partial = false,
  ): Promise<ChatMessage[]> {
    const n = await count(messages);
    if (n <= window) return messages;
    if (truncation !== 'auto') {
      if (partial) throw new AppError('context_length_exceeded', msg('context_exceeded_at_least', { tokens: n, window, model: spec.name }), 'input');
      throw new AppError(
        'context_length_exceeded',
        `Your input is ${n} tokens, which exceeds the context window of ${window} tokens of the model '${spec.name}'. Shorten the input or set truncation to "auto".`,
        'input',
      );
    }
    const head = messages.filter((m, i) => i === 0 && m.role === 'system');
    const rest = messages.slice(head.length);
    // where the kept conversation may start: drop whole turns from the start (a message, or an assistant tool-call
    // message with its outputs), never starting on a tool output, keeping at least one message
    const starts = [0];
    for (let s = 0; rest.length - s > 1;) {
      const first = rest[s]!;
      let cut = s + 1;
      if (first.toolCalls?.length) {
        const ids = new Set(first.toolCalls.map((c) => c.callId));
        while (cut < rest.length && rest[cut]!.role === 'tool' && ids.has(rest[cut]!.toolCallId ?? '')) cut++;
      }
      while (rest.length - cut > 1 && rest[cut]!.role === 'tool') cut++;
      starts.push((s = cut));
    }
    // the fewest turns dropped that fit: a binary search (the count falls as turns are dropped), each count after a
    // turn of the event loop, so a long history costs a few counts and never one long stall
    let lo = 1;
    let hi = starts.length - 1;
    let best = -1;
    let bestN = n;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      await new Promise<void>((r) => setImmediate(r));
      const m = await count([...head, ...rest.slice(starts[mid])]);
      if (m <= window) {
        best = mid;
        bestN = m;
        hi = mid - 1;
      } else {
        lo = mid + 1;
        if (mid === starts.length - 1) bestN = m;
      }
    }
    if (best < 0) {
      if (starts.length > 1 && bestN === n) bestN = await count([...head, ...rest.slice(starts[starts.length - 1])]);
      throw new AppError(
        'context_length_exceeded',
        `Even after truncation the input is ${bestN} tokens, more than the context window of ${window} tokens of the model '${spec.name}'.`,
        'input',
      );
    }
    return [...head, ...rest.slice(starts[best])];
  }
}

/**
 * About the UTF-8 bytes of `value`'s JSON text, without making it (a 16 MiB input is walked, not serialized): its
 * strings' and keys' bytes, their quotes and the punctuation between values. Escapes are not counted.
 */
export function jsonBytes(value: unknown): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v === 'string') n += Buffer.byteLength(v) + 3;
    else if (typeof v === 'number' || typeof v === 'boolean') n += String(v).length + 1;
    else if (v === null || v === undefined) n += 5;
    else if (Array.isArray(v)) {
      n += 2;
      for (let i = 0; i < v.length; i++) stack.push(v[i]);
    } else if (typeof v === 'object') {
      n += 2;
      for (const k in v) {
        if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
        n += Buffer.byteLength(k) + 4;
        stack.push((v as Record<string, unknown>)[k]);
      }
    }
  }
  return n;
}
