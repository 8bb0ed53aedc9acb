/**
 * Everything decided before any output: the model and its engine, tools and formats, the conversation rebuilt
 * from the stored chain, and the context window. A request that gets through `prepare` is valid.
 */
import { AppError, type ErrorCode } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { ChatMessage, GenerateRequest, TextEngine, TextFormat, ToolChoice } from '../engines/types.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { deploymentName, upstreamName, type ModelSpec } from '../models/spec.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import { assertModelScope } from '../api/scopes.js';
import type { Hold } from '../api/admission.js';
import { fromEngineError } from '../api/engine-errors.js';
import { checkCallOutputs, expandReasoningContent, largeInput, normalizeInput, normalizeInputInTurns, rawIndexOf, toChatMessages, type StoredItem } from './input.js';
import { initialResponse, normalizedTools, outputAsItems, type ResponseObject } from './object.js';
import type { ResponseStore } from './store.js';
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
    const spec = this.d.models.require(req.model, 'text');
    assertModelScope(key, spec.name);
    const facts = ctx.facts;
    if (facts) {
      facts.model = spec.name;
      facts.deployment = deploymentName(spec);
    }
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
    const history = ctx.history ?? (req.previous_response_id ? await this.history(req.previous_response_id, key) : []);
    const outputAt = rawIndexOf(req.input, inputItems, 'function_call_output');
    checkCallOutputs(history, inputItems, (i) => {
      const k = outputAt(i);
      return k === undefined ? 'input' : `input[${k}].call_id`;
    });
    const seen = [
      ...(await openCompactions(history, key.userId, this.d.sealer, () => 'previous_response_id')),
      ...(await openCompactions(inputItems, key.userId, this.d.sealer, compactionParams(req.input, inputItems))),
    ];
    let messages = toChatMessages(req.instructions, seen);
    let engine: TextEngine;
    try {
      engine = await this.d.engines.text(spec);
    } catch (e) {
      facts?.failed(e);
      throw fromEngineError(e);
    }
    const window = engine.contextWindow ?? spec.context_window;
    const engineTools = tools.map((t) => ({
      name: t.name as string,
      description: (t.description as string | null) ?? undefined,
      parameters: (t.parameters as Record<string, unknown> | null) ?? undefined,
      strict: (t.strict as boolean | null) ?? undefined,
    }));
    if (window) messages = await this.fit(engine, spec, messages, engineTools, window, req.truncation ?? 'disabled');

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
  async history(previousResponseId: string, key: KeyPrincipal): Promise<StoredItem[]> {
    const chain = await this.d.store.chain(previousResponseId, key.userId);
    const last = chain[chain.length - 1];
    if (!last) throw new AppError('previous_response_not_found', `Previous response with id '${previousResponseId}' not found.`, 'previous_response_id');
    if (last.object.status === 'in_progress') {
      throw bad(`Previous response '${previousResponseId}' is still in_progress; wait until it finishes`, 'previous_response_id', 'invalid_state');
    }
    const history: StoredItem[] = [];
    for (const c of chain) history.push(...c.inputItems, ...outputAsItems(c.object.output));
    return history;
  }

  /** POST /responses/input_tokens: the tokens the input would take (truncation auto: what would be sent). */
  async inputTokens(req: CreateResponseRequest, key: KeyPrincipal): Promise<{ object: 'response.input_tokens'; input_tokens: number }> {
    const p = await this.prepare({ ...req, truncation: 'auto' }, key, 'count');
    const n = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools });
    return { object: 'response.input_tokens', input_tokens: n };
  }

  /** truncation disabled: 400 when the input does not fit; auto: drop the oldest turns (never the instructions). */
  private async fit(
    engine: TextEngine,
    spec: ModelSpec,
    messages: ChatMessage[],
    tools: GenerateRequest['tools'],
    window: number,
    truncation: 'auto' | 'disabled',
  ): Promise<ChatMessage[]> {
    const count = (m: ChatMessage[]) => engine.countTokens({ model: upstreamName(spec), messages: m, tools: tools?.length ? tools : undefined });
    const n = await count(messages);
    if (n <= window) return messages;
    if (truncation !== 'auto') {
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
