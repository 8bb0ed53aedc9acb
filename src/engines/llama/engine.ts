/**
 * The embedded llama.cpp text engine (node-llama-cpp). One model, one context with `parallel` sequences; each
 * request borrows a sequence (waiting in a FIFO queue when all are busy), formats the conversation with the
 * model's own chat template and streams tokens.
 */
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  getLlama,
  LlamaChat,
  LlamaLogLevel,
  TokenMeter,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type ChatWrapper,
  type GbnfJsonSchema,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';
import { EngineError, type FinishReason, type FunctionTool, type GenerateEvent, type GenerateRequest, type TextEngine, type Usage } from '../types.js';
import { toChatHistory } from './history.js';
import { describeToolsForProtocol, forcedCallSchema, toGbnfSchema } from './schema.js';
import { abortError, newCallId, ThinkTagSplitter, ToolCallScanner } from './util.js';
import { AsyncChannel } from '../../platform/async-channel.js';
import { whenIdle } from '../shared/idle.js';

export interface LlamaEngineOptions {
  /** path of the .gguf file */
  path: string;
  /** tokens per sequence (default 4096, never more than the model was trained on) */
  contextSize?: number;
  /** sequences generating at the same time; more requests wait in a queue (default 2) */
  parallel?: number;
  /** CPU threads (default: 1 for models under 64 MB, where more threads only add synchronisation, else all cores up to 8) */
  threads?: number;
  /** prompt batch size (default: llama.cpp's, 512 or the context size) */
  batchSize?: number;
  /** false (default): CPU only; 'auto': use a GPU binary when node-llama-cpp has one installed */
  gpu?: false | 'auto';
  /** conversation states kept for `cacheKey` reuse (default 8); spilled to temporary files when their sequence is reused */
  maxSavedStates?: number;
  /** default sampling temperature when a request has none (default 0.8) */
  defaultTemperature?: number;
  /** load at creation (default true); false loads on the first request */
  eager?: boolean;
}

type Mode =
  | { kind: 'text' }
  | { kind: 'grammar'; grammar: LlamaGrammar }
  | { kind: 'functions'; functions: ChatModelFunctions; maxParallel?: number }
  | { kind: 'forced'; grammar: LlamaGrammar; parallel: boolean };

interface Slot {
  index: number;
  sequence: LlamaContextSequence;
  chat: LlamaChat;
  busy: boolean;
  lastUsed: number;
}

interface SavedState {
  key: string;
  /** the sequence's tokens when the state was saved */
  tokens: Token[];
  /** the sequence still holding it, if not overwritten */
  slot?: Slot;
  /** spilled copy */
  file?: string;
}

interface Waiter {
  promptTokens: Token[];
  cacheKey?: string;
  resolve: (s: Slot) => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Prepared {
  history: ChatHistoryItem[];
  mode: Mode;
  promptTokens: Token[];
}

const llamaInstances = new Map<string, Promise<Llama>>();

export function sharedLlama(gpu: false | 'auto'): Promise<Llama> {
  const key = String(gpu);
  let p = llamaInstances.get(key);
  if (!p) {
    p = getLlama({ build: 'never', gpu, logLevel: LlamaLogLevel.error, progressLogs: false, skipDownload: true });
    llamaInstances.set(key, p);
    p.catch(() => llamaInstances.delete(key));
  }
  return p;
}

export class LlamaEngine implements TextEngine {
  readonly kind = 'llama';
  private readonly opts: Required<Omit<LlamaEngineOptions, 'threads' | 'batchSize' | 'contextSize'>> & Pick<LlamaEngineOptions, 'threads' | 'batchSize' | 'contextSize'>;
  private loading: Promise<void> | undefined;
  private llama!: Llama;
  private model!: LlamaModel;
  private context!: LlamaContext;
  private wrapper!: ChatWrapper;
  private slots: Slot[] = [];
  private queue: Waiter[] = [];
  private states = new Map<string, SavedState>();
  private stateDir: string | undefined;
  private closed = false;
  private ctxSize: number | undefined;
  private jsonGrammar: Promise<LlamaGrammar> | undefined;
  private grammarCache = new Map<string, Promise<LlamaGrammar>>();
  /** milliseconds the model took to load (for diagnostics) */
  loadMs: number | undefined;

  constructor(options: LlamaEngineOptions) {
    if (!options.path) throw new EngineError('llama engine: a model path is required', 'invalid_config', 500);
    this.opts = {
      parallel: 2,
      gpu: false,
      maxSavedStates: 8,
      defaultTemperature: 0.8,
      eager: true,
      ...options,
    };
    if (!(this.opts.parallel >= 1)) throw new EngineError('llama engine: parallel must be at least 1', 'invalid_config', 500);
  }

  /** Where it runs and how long it took to load (after load), for the start log. */
  info(): { device: string; loadMs?: number } {
    return { device: this.llama ? (this.llama.gpu ? `GPU (${this.llama.gpu})` : 'CPU') : 'not loaded', loadMs: this.loadMs };
  }

  /** Context window in tokens (per sequence): the requested size until the model is loaded, then the actual one. */
  get contextWindow(): number | undefined {
    return this.ctxSize ?? this.opts.contextSize ?? 4096;
  }

  /** The chat template wrapper node-llama-cpp resolved from the model (after load). */
  get chatWrapperName(): string | undefined {
    return this.wrapper?.wrapperName;
  }

  /** Loads the model (once); every other method calls it. */
  load(): Promise<void> {
    if (this.closed) return Promise.reject(new EngineError('llama engine is closed', 'engine_closed', 503));
    this.loading ??= this.doLoad().catch((err) => {
      this.loading = undefined;
      throw err instanceof EngineError ? err : new EngineError(`Could not load model ${this.opts.path}: ${(err as Error).message}`, 'model_load_failed', 500);
    });
    return this.loading;
  }

  private async doLoad(): Promise<void> {
    const t0 = Date.now();
    this.llama = await sharedLlama(this.opts.gpu);
    this.model = await this.llama.loadModel({ modelPath: this.opts.path });
    const train = this.model.trainContextSize || 4096;
    const wanted = Math.min(this.opts.contextSize ?? 4096, train);
    const threads = this.opts.threads ?? (this.model.size < 64 * 1024 * 1024 ? 1 : Math.min(8, availableParallelism()));
    this.context = await this.model.createContext({
      contextSize: wanted,
      sequences: this.opts.parallel,
      threads,
      ...(this.opts.batchSize ? { batchSize: this.opts.batchSize } : {}),
    });
    for (let i = 0; i < this.opts.parallel; i++) {
      const sequence = this.context.getSequence();
      const chat: LlamaChat = new LlamaChat({ contextSequence: sequence, chatWrapper: this.wrapper ?? 'auto' });
      this.wrapper ??= chat.chatWrapper;
      this.slots.push({ index: i, sequence, chat, busy: false, lastUsed: 0 });
    }
    // parallel >= 1 (checked in the constructor), so there is a first slot; all sequences share one size
    this.ctxSize = this.slots[0]?.sequence.contextSize ?? this.context.contextSize;
    this.loadMs = Date.now() - t0;
  }

  // ---------------------------------------------------------------- request preparation

  private async grammarForSchema(schema: Record<string, unknown>): Promise<LlamaGrammar> {
    const key = JSON.stringify(schema);
    let g = this.grammarCache.get(key);
    if (!g) {
      g = this.llama.createGrammarForJsonSchema(schema as never).then((jsonGrammar) => this.saneNumbers(jsonGrammar));
      this.grammarCache.set(key, g);
      g.catch(() => this.grammarCache.delete(key));
      if (this.grammarCache.size > 64) this.grammarCache.delete(this.grammarCache.keys().next().value as string);
    }
    try {
      return await g;
    } catch (err) {
      throw new EngineError(`Unsupported JSON schema: ${(err as Error).message}`, 'invalid_json_schema', 400);
    }
  }

  /**
   * node-llama-cpp's number rules allow exponents of up to 16 digits (`"count": 37e5441`), which parse to Infinity
   * and are not integers after JSON.parse: integers get no exponent, fractions at most a two-digit one.
   */
  private async saneNumbers(grammar: LlamaGrammar): Promise<LlamaGrammar> {
    const text = grammar.grammar;
    const patched = text
      .replace(/^integer-number-rule ::= .*$/m, 'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14})')
      .replace(/^fractional-number-rule ::= .*$/m, 'fractional-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?');
    if (patched === text) return grammar;
    return this.llama.createGrammar({
      grammar: patched,
      stopGenerationTriggers: grammar.stopGenerationTriggers,
      trimWhitespaceSuffix: grammar.trimWhitespaceSuffix,
      rootRuleName: grammar.rootRuleName,
    });
  }

  private async prepare(req: Pick<GenerateRequest, 'messages' | 'tools' | 'toolChoice' | 'parallelToolCalls' | 'format' | 'maxToolCalls'>): Promise<Prepared> {
    const choice = req.toolChoice ?? 'auto';
    let tools: FunctionTool[] = choice === 'none' ? [] : (req.tools ?? []);
    if (typeof choice === 'object') {
      tools = tools.filter((t) => t.name === choice.name);
      if (tools.length === 0) throw new EngineError(`tool_choice names unknown function "${choice.name}"`, 'invalid_tool_choice', 400);
    }
    if (choice === 'required' && tools.length === 0) {
      throw new EngineError('tool_choice "required" needs at least one function tool', 'invalid_tool_choice', 400);
    }
    // one call allowed (parallel_tool_calls false, or max_tool_calls 1): the grammar and the chat wrapper allow one
    const parallel = req.parallelToolCalls !== false && req.maxToolCalls !== 1;
    const forced = tools.length > 0 && (choice === 'required' || typeof choice === 'object');
    const format = req.format && req.format.type !== 'text' ? req.format : undefined;

    let mode: Mode;
    let extraSystem: string | undefined;
    if (forced) {
      const grammar = await this.grammarForSchema(forcedCallSchema(tools, parallel));
      mode = { kind: 'forced', grammar, parallel };
      extraSystem = describeToolsForProtocol(tools, parallel, true);
    } else if (format) {
      const grammar = format.type === 'json_object' ? await (this.jsonGrammar ??= this.llama.getGrammarFor('json')) : await this.grammarForSchema(toGbnfSchema(format.schema));
      mode = { kind: 'grammar', grammar };
      if (tools.length > 0) extraSystem = describeToolsForProtocol(tools, parallel, false);
    } else if (tools.length > 0) {
      const functions: Record<string, { description?: string; params?: GbnfJsonSchema }> = {};
      for (const t of tools) {
        const hasParams = t.parameters && Object.keys(t.parameters).length > 0;
        functions[t.name] = {
          ...(t.description ? { description: t.description } : {}),
          ...(hasParams ? { params: toGbnfSchema(t.parameters) as GbnfJsonSchema } : {}),
        };
      }
      mode = { kind: 'functions', functions, maxParallel: parallel ? req.maxToolCalls : 1 };
    } else mode = { kind: 'text' };

    const history = toChatHistory(req.messages, extraSystem);
    const state = this.wrapper.generateContextState({
      chatHistory: history,
      availableFunctions: mode.kind === 'functions' ? mode.functions : undefined,
      documentFunctionParams: mode.kind === 'functions' ? true : undefined,
    });
    const promptTokens = state.contextText.tokenize(this.model.tokenizer);
    return { history, mode, promptTokens };
  }

  async countTokens(req: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>): Promise<number> {
    await this.load();
    return (await this.prepare({ messages: req.messages, tools: req.tools })).promptTokens.length;
  }

  // ---------------------------------------------------------------- sequence pool

  private tokensHeld(slot: Slot, tokens: Token[]): boolean {
    const held = slot.sequence.contextTokens;
    if (held.length < tokens.length) return false;
    for (let i = 0; i < tokens.length; i++) if (held[i] !== tokens[i]) return false;
    return true;
  }

  /** Waits for a free sequence (FIFO), then gives the one that best matches the prompt, marked busy. */
  private acquire(promptTokens: Token[], cacheKey: string | undefined, signal?: AbortSignal): Promise<Slot> {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    if (this.closed) return Promise.reject(new EngineError('llama engine is closed', 'engine_closed', 503));
    if (this.queue.length === 0 && this.slots.some((s) => !s.busy)) return Promise.resolve(this.pickSlot(promptTokens, cacheKey));
    return new Promise<Slot>((resolve, reject) => {
      const entry: Waiter = { promptTokens, cacheKey, resolve, reject, signal };
      if (signal) {
        entry.onAbort = () => {
          const i = this.queue.indexOf(entry);
          if (i >= 0) this.queue.splice(i, 1);
          reject(abortError(signal));
        };
        signal.addEventListener('abort', entry.onAbort, { once: true });
      }
      this.queue.push(entry);
    });
  }

  /** Prompt and generated tokens llama.cpp actually evaluated, over all sequences (cached prefixes are not). */
  get evaluatedTokens(): number {
    return this.slots.reduce((n, s) => n + s.sequence.tokenMeter.usedInputTokens, 0);
  }

  /** Number of requests waiting for a sequence. */
  get waiting(): number {
    return this.queue.length;
  }

  private pickSlot(promptTokens: Token[], cacheKey?: string): Slot {
    const free = this.slots.filter((s) => !s.busy);
    const saved = cacheKey ? this.states.get(cacheKey) : undefined;
    let best: Slot | undefined;
    if (saved?.slot && !saved.slot.busy && this.tokensHeld(saved.slot, saved.tokens)) best = saved.slot;
    if (!best) {
      let bestLen = -1;
      for (const s of free) {
        const len = s.sequence.compareContextTokens(promptTokens).firstDifferentIndex;
        if (len > bestLen || (len === bestLen && best && s.lastUsed < best.lastUsed)) {
          best = s;
          bestLen = len;
        }
      }
    }
    if (!best) throw new EngineError('no free sequence', 'engine_error', 500);
    best.busy = true;
    best.lastUsed = Date.now();
    return best;
  }

  private release(slot: Slot): void {
    slot.busy = false;
    const next = this.queue.shift();
    if (next) {
      if (next.signal && next.onAbort) next.signal.removeEventListener('abort', next.onAbort);
      next.resolve(this.pickSlot(next.promptTokens, next.cacheKey));
    }
  }

  /** Saves states only this sequence holds before the sequence is overwritten by an unrelated prompt. */
  private async protectSlotStates(slot: Slot, promptTokens: Token[]): Promise<void> {
    const reusable = slot.sequence.compareContextTokens(promptTokens).firstDifferentIndex;
    let latest: SavedState | undefined;
    for (const st of this.states.values()) {
      if (st.slot !== slot) continue;
      if (!this.tokensHeld(slot, st.tokens)) {
        st.slot = undefined;
        continue;
      }
      if (reusable >= st.tokens.length) continue; // the new prompt extends it: it stays valid
      if (st.file) {
        st.slot = undefined;
        continue;
      }
      if (!latest || st.tokens.length > latest.tokens.length) latest = st;
    }
    for (const st of this.states.values()) if (st.slot === slot && st !== latest && reusable < st.tokens.length) st.slot = undefined;
    if (latest) {
      try {
        this.stateDir ??= mkdtempSync(join(tmpdir(), 'portico-llama-'));
        const file = join(this.stateDir, `${latest.key.replace(/[^A-Za-z0-9_.-]/g, '_')}-${Date.now()}.state`);
        await slot.sequence.saveStateToFile(file);
        latest.file = file;
      } catch {
        this.states.delete(latest.key);
      }
      latest.slot = undefined;
    }
  }

  private async restoreState(slot: Slot, promptTokens: Token[], cacheKey?: string): Promise<void> {
    const saved = cacheKey ? this.states.get(cacheKey) : undefined;
    if (!saved?.file || saved.slot === slot) return;
    const here = slot.sequence.compareContextTokens(promptTokens).firstDifferentIndex;
    let fromFile = 0;
    while (fromFile < saved.tokens.length && fromFile < promptTokens.length && saved.tokens[fromFile] === promptTokens[fromFile]) fromFile++;
    if (fromFile <= here) return;
    try {
      await slot.sequence.loadStateFromFile(saved.file, { acceptRisk: true });
    } catch {
      await slot.sequence.clearHistory().catch(() => undefined);
    }
  }

  private rememberState(key: string, slot: Slot): void {
    const old = this.states.get(key);
    if (old) {
      this.states.delete(key);
      if (old.file) void unlink(old.file).catch(() => undefined);
    }
    this.states.set(key, { key, tokens: slot.sequence.contextTokens.slice(), slot });
    while (this.states.size > this.opts.maxSavedStates) {
      const [k, st] = this.states.entries().next().value as [string, SavedState];
      this.states.delete(k);
      if (st.file) void unlink(st.file).catch(() => undefined);
    }
  }

  private touchState(key?: string): void {
    const st = key ? this.states.get(key) : undefined;
    if (st) {
      this.states.delete(st.key);
      this.states.set(st.key, st);
    }
  }

  // ---------------------------------------------------------------- generation

  generate(req: GenerateRequest): AsyncIterable<GenerateEvent> {
    const self = this;
    return {
      [Symbol.asyncIterator]() {
        return self.run(req);
      },
    };
  }

  private async *run(req: GenerateRequest): AsyncGenerator<GenerateEvent> {
    await this.load();
    const prepared = await this.prepare(req);
    const ctx = this.ctxSize as number;
    const promptLen = prepared.promptTokens.length;
    if (promptLen + 1 >= ctx) {
      throw new EngineError(`This model's context window is ${ctx} tokens; the input has ${promptLen} tokens.`, 'context_length_exceeded', 400);
    }
    if (req.maxOutputTokens !== undefined && !(req.maxOutputTokens >= 1)) {
      throw new EngineError('max_output_tokens must be at least 1', 'invalid_request', 400);
    }

    const slot = await this.acquire(prepared.promptTokens, req.cacheKey, req.signal);
    const internal = new AbortController();
    const onAbort = () => internal.abort(req.signal?.reason);
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const channel = new AsyncChannel<GenerateEvent>();
    let finished = false;
    let job: Promise<void> | undefined;
    try {
      await this.protectSlotStates(slot, prepared.promptTokens);
      await this.restoreState(slot, prepared.promptTokens, req.cacheKey);
      this.touchState(req.cacheKey);
      if (req.signal?.aborted) throw abortError(req.signal);

      const reusable = slot.sequence.compareContextTokens(prepared.promptTokens).firstDifferentIndex;
      const cachedTokens = Math.min(reusable, promptLen - 1);
      job = this.runOnSlot(slot, req, prepared, internal.signal, channel, cachedTokens);
      job.then(
        () => channel.end(),
        (err) => channel.fail(err),
      );
      for await (const ev of channel) yield ev;
      finished = true;
      await job;
      if (req.saveKey) this.rememberState(req.saveKey, slot);
    } finally {
      if (!finished) internal.abort(); // the consumer stopped early or an error happened
      req.signal?.removeEventListener('abort', onAbort);
      // wait for the native generation to stop before handing the sequence to someone else
      if (job) await job.catch(() => undefined);
      this.release(slot);
    }
  }

  private readonly running = new Map<Slot, Promise<unknown>>();

  private async runOnSlot(slot: Slot, req: GenerateRequest, prepared: Prepared, signal: AbortSignal, out: AsyncChannel<GenerateEvent>, cachedTokens: number): Promise<void> {
    const { mode, history, promptTokens } = prepared;
    const ctx = this.ctxSize as number;
    const room = ctx - promptTokens.length - 1;
    const maxTokens = Math.max(1, Math.min(req.maxOutputTokens ?? room, room));
    const meterStart = slot.sequence.tokenMeter.getState();

    let reasoningTokens = 0;
    const thoughtsNative = this.wrapper.settings.segments?.thought != null;
    const splitter = thoughtsNative ? undefined : new ThinkTagSplitter(false);
    const emitText = (kind: 'reasoning' | 'text', s: string) => {
      if (!s) return;
      if (kind === 'reasoning') out.push({ type: 'reasoning_delta', delta: s });
      else if (scanner) scanner.push(s);
      else out.push({ type: 'text_delta', delta: s });
    };
    // once max_tool_calls calls are made no more may be: generation stops there instead of running on to the token cap
    const enough = new AbortController();
    const scanner =
      mode.kind === 'forced'
        ? new ToolCallScanner(mode.parallel, {
            // a call begun in the same chunk that ended the last allowed one is not passed on
            start: (callId, name) => !enough.signal.aborted && out.push({ type: 'tool_call_start', callId, name }),
            delta: (callId, delta) => !enough.signal.aborted && out.push({ type: 'tool_call_delta', callId, delta }),
            end: (callId, args, incomplete) => {
              if (enough.signal.aborted) return;
              out.push(incomplete ? { type: 'tool_call_end', callId, arguments: args, incomplete } : { type: 'tool_call_end', callId, arguments: args });
              if (!incomplete && req.maxToolCalls !== undefined && scanner!.calls.filter((c) => c.complete).length >= req.maxToolCalls) enough.abort();
            },
          })
        : undefined;

    // native function calls (tool_choice auto)
    let nativeCall: { index: number; callId: string; args: string } | undefined;
    let nativeCalls = 0;
    /** `cut`: the token cap ended the call before its arguments did (incomplete, arguments as written) */
    const endNative = (cut = false) => {
      if (nativeCall) {
        out.push(
          cut
            ? { type: 'tool_call_end', callId: nativeCall.callId, arguments: nativeCall.args, incomplete: true }
            : { type: 'tool_call_end', callId: nativeCall.callId, arguments: nativeCall.args || '{}' },
        );
        nativeCall = undefined;
      }
    };

    const temperature = req.temperature ?? this.opts.defaultTemperature;
    const penalties = req.presencePenalty !== undefined || req.frequencyPenalty !== undefined;
    const common = {
      signal: AbortSignal.any([signal, enough.signal]),
      stopOnAbortSignal: true,
      maxTokens,
      temperature,
      // node-llama-cpp's default seed is fixed; clients expect different samples per request unless they give a seed
      seed: req.seed !== undefined ? ((req.seed % 2 ** 32) + 2 ** 32) % 2 ** 32 : randomInt(2 ** 31),
      ...(req.topP !== undefined && temperature > 0 ? { topP: req.topP } : {}),
      // OpenAI's presence and frequency penalties are llama.cpp's (subtracted from the logits of tokens already
      // generated), applied by node-llama-cpp over the last 64 generated tokens; the repeat penalty stays at its default
      ...(penalties ? { repeatPenalty: { presencePenalty: req.presencePenalty ?? 0, frequencyPenalty: req.frequencyPenalty ?? 0 } } : {}),
      ...(req.stop && req.stop.length > 0 ? { customStopTriggers: req.stop.filter((s) => s.length > 0) } : {}),
      ...(thoughtBudget(req.reasoningEffort) !== undefined ? { budgets: { thoughtTokens: thoughtBudget(req.reasoningEffort) } } : {}),
      onResponseChunk: (chunk: { type: 'segment' | undefined; segmentType?: string; text: string; tokens: Token[] }) => {
        if (chunk.type === 'segment') {
          if (chunk.segmentType === 'thought') {
            reasoningTokens += chunk.tokens.length;
            if (chunk.text) out.push({ type: 'reasoning_delta', delta: chunk.text });
          }
          return; // other segment kinds (comments) are not part of the answer
        }
        if (splitter) {
          const before = splitter.inThought;
          splitter.push(chunk.text, emitText);
          if (before || splitter.inThought) reasoningTokens += chunk.tokens.length;
        } else emitText('text', chunk.text);
      },
    };

    const promise =
      mode.kind === 'functions'
        ? slot.chat.generateResponse(history, {
            ...common,
            functions: mode.functions,
            documentFunctionParams: true,
            ...(mode.maxParallel ? { maxParallelFunctionCalls: mode.maxParallel } : {}),
            onFunctionCallParamsChunk: (c) => {
              if (!nativeCall || nativeCall.index !== c.callIndex) {
                endNative();
                if (mode.maxParallel && nativeCalls >= mode.maxParallel) return;
                nativeCall = { index: c.callIndex, callId: newCallId(), args: '' };
                nativeCalls++;
                out.push({ type: 'tool_call_start', callId: nativeCall.callId, name: c.functionName });
              }
              if (c.paramsChunk) {
                nativeCall.args += c.paramsChunk;
                out.push({ type: 'tool_call_delta', callId: nativeCall.callId, delta: c.paramsChunk });
              }
              if (c.done) endNative();
            },
          })
        : slot.chat.generateResponse(history, {
            ...common,
            ...(mode.kind === 'grammar' || mode.kind === 'forced' ? { grammar: mode.grammar } : {}),
          });
    this.running.set(slot, promise);
    let res: Awaited<typeof promise>;
    try {
      res = await promise;
    } catch (err) {
      if (signal.aborted) throw abortError(signal);
      throw new EngineError(`Generation failed: ${(err as Error).message}`, 'engine_error', 500);
    } finally {
      this.running.delete(slot);
    }
    const stopReason = res.metadata.stopReason;
    splitter?.flush(emitText);
    endNative(stopReason === 'maxTokens');
    scanner?.finish();

    const used = TokenMeter.diff(slot.sequence.tokenMeter.getState(), meterStart);
    let finishReason: FinishReason = stopReason === 'maxTokens' ? 'length' : 'stop';
    if (mode.kind === 'functions' && nativeCalls > 0 && stopReason !== 'maxTokens') finishReason = 'tool_calls';
    if (scanner && scanner.calls.length > 0 && (enough.signal.aborted || scanner.calls.every((c) => c.complete)) && stopReason !== 'maxTokens') finishReason = 'tool_calls';
    const usage: Usage = {
      inputTokens: promptTokens.length,
      outputTokens: used.usedOutputTokens,
      cachedTokens,
    };
    if (reasoningTokens > 0) usage.reasoningTokens = reasoningTokens;
    out.push({ type: 'done', finishReason, usage, model: req.model });
  }

  /** Closes once no request waits for a sequence or generates on one (a reload retired this model). */
  async retire(): Promise<void> {
    await whenIdle(() => this.closed || (this.queue.length === 0 && this.slots.every((s) => !s.busy)));
    await this.close();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const q of this.queue.splice(0)) q.reject(new EngineError('llama engine is closed', 'engine_closed', 503));
    const loading = this.loading;
    if (loading) {
      await loading.catch(() => undefined);
      await Promise.all([...this.running.values()].map((p) => p.catch(() => undefined)));
      for (const s of this.slots) s.chat.dispose({ disposeSequence: true });
      await this.context?.dispose();
      await this.model?.dispose();
    }
    if (this.stateDir) rmSync(this.stateDir, { recursive: true, force: true });
    this.states.clear();
  }
}

function thoughtBudget(effort?: string): number | undefined {
  switch (effort) {
    case 'none':
    case 'minimal':
      return 0;
    case 'low':
      return 256;
    case 'medium':
      return 1024;
    default:
      return undefined;
  }
}

/** Creates the engine; with `eager` (default) the model is loaded before this resolves. */
export async function createLlamaEngine(options: LlamaEngineOptions): Promise<LlamaEngine> {
  const engine = new LlamaEngine(options);
  if (options.eager !== false) await engine.load();
  return engine;
}
