/**
 * Everything decided before a message is generated: the model and its engine (models.require, then engines.text,
 * so the router's deployments, retries and fallbacks apply), and Anthropic's request translated to the engines'
 * GenerateRequest. What has no equivalent in it is refused with a 400 naming the field, never dropped
 * (docs/api.md, "Anthropic Messages API"). A model whose every deployment speaks Anthropic's Messages API itself
 * is forwarded instead: the client's body as it is, the model name mapped (./forwarding.ts).
 */
import { randomBytes } from 'node:crypto';
import { AppError, type ValidationDetail } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { ChatContentPart, ChatMessage, FunctionTool, GenerateRequest, RouteNote, TextEngine, TextFormat, ToolChoice } from '../engines/types.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import { resolveEngine, resolveModel } from '../api/metering.js';
import type { ContentBlockParam, CountTokensRequest, MessageParam, MessagesRequest } from './schemas.js';
import { clientBetas, forwardedCount, forwardsAll } from './forwarding.js';

export interface PreparedMessage {
  /** msg_... */
  id: string;
  key: KeyPrincipal;
  requestId: string;
  spec: ModelSpec;
  engine: TextEngine;
  stream: boolean;
  /** the client's max_tokens */
  maxTokens: number;
  /** translated: the engine's request */
  gen?: GenerateRequest;
  /** forwarded (./forwarding.ts): the body sent upstream as it is, the model name mapped */
  forward?: Record<string, unknown>;
  /** forwarded: the client's anthropic-beta values */
  betas?: readonly string[];
  /** the conversation as the engine counts it (admission, and the estimate when an engine gives no usage) */
  count: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>;
  facts?: RequestFacts;
  route: RouteNote;
}

export interface MessagesPrepareDeps {
  models: ModelRegistry;
  engines: TextEngineSource;
}

const bad = (message: string, param: string, detail: ValidationDetail = 'invalid_value') => new AppError('validation_error', message, param, { detail });
const unsupported = (what: string, param: string) =>
  new AppError('unsupported_parameter', `${what} is not supported by Portico's Messages API in front of this model's engine.`, param);

/** msg_ + 24 base62 characters, as Anthropic's ids look */
export function messageId(): string {
  const abc = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let s = 'msg_';
  for (const x of randomBytes(24)) s += abc[x % 62];
  return s;
}

/**
 * thinking.budget_tokens as the engines' reasoning effort (the llama engine bounds its thought at 256 tokens for
 * low and 1024 for medium; an upstream gets `reasoning_effort`): the smallest effort whose budget holds it.
 */
export function effortOfBudget(budget: number): 'low' | 'medium' | 'high' {
  return budget <= 2048 ? 'low' : budget <= 8192 ? 'medium' : 'high';
}

/**
 * What the route hands over besides the body: the schema's verdict (the route validates with attachValidation, so
 * a body the translation's schema refuses may still be forwarded as it is) and the client's anthropic-beta values.
 */
export interface RequestContext {
  /** the route schema's error, when the body does not pass it: thrown unless the request is forwarded */
  invalid?: Error;
  /** the client's anthropic-beta header: read only when the request is forwarded (./forwarding.ts clientBetas) */
  betaHeader?: string | string[];
}

/** what a forwarded body must be for Portico itself (the upstream validates the rest) */
function checkForwarded(body: Record<string, unknown>, count: boolean, invalid: Error): void {
  if (!count && (typeof body.max_tokens !== 'number' || !Number.isInteger(body.max_tokens) || body.max_tokens < 1)) throw invalid;
  if (body.stream !== undefined && typeof body.stream !== 'boolean') throw invalid;
  if (!Array.isArray(body.messages)) throw invalid;
}

export class MessagesPreparer {
  constructor(private readonly d: MessagesPrepareDeps) {}

  /**
   * The model, and whether the request is forwarded as it is (./forwarding.ts): the engine when it is, nothing
   * when it is translated. A body the schema refused is refused here unless it is forwarded.
   */
  private async forwarding(req: CountTokensRequest, key: KeyPrincipal, ctx: RequestContext, count: boolean, facts?: RequestFacts) {
    const body = req as unknown as Record<string, unknown>;
    if (ctx.invalid && (body === null || typeof body !== 'object' || Array.isArray(body) || typeof body.model !== 'string' || body.model === '' || body.model.length > 200))
      throw ctx.invalid;
    let spec: ModelSpec;
    try {
      spec = resolveModel(this.d.models, req.model, 'text', key, facts);
    } catch (e) {
      throw ctx.invalid ?? e;
    }
    if (!forwardsAll(spec, this.d.models)) {
      if (ctx.invalid) throw ctx.invalid;
      return undefined;
    }
    if (ctx.invalid) checkForwarded(body, count, ctx.invalid);
    const engine = await resolveEngine(() => this.d.engines.text(spec), facts);
    // an engine made by code, without a model file entry, has the last word
    if (!engine.messages) {
      if (ctx.invalid) throw ctx.invalid;
      return undefined;
    }
    const betas = clientBetas(ctx.betaHeader);
    const model = upstreamName(spec);
    const route: RouteNote = {};
    if (facts) facts.route = route;
    // the client's body as it is, but for the model name (in its place)
    const forward: Record<string, unknown> = { ...body, model };
    return { spec, engine, model, route, forward, betas, count: forwardedCount(body, model) };
  }

  /** POST /v1/messages */
  async prepare(req: MessagesRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts, ctx: RequestContext = {}): Promise<PreparedMessage> {
    const fwd = await this.forwarding(req, key, ctx, false, facts);
    if (fwd) {
      return {
        id: messageId(),
        key,
        requestId,
        spec: fwd.spec,
        engine: fwd.engine,
        stream: req.stream === true,
        maxTokens: req.max_tokens,
        forward: fwd.forward,
        betas: fwd.betas,
        count: fwd.count,
        facts,
        route: fwd.route,
      };
    }
    if (req.top_k !== undefined) throw unsupported("'top_k' (no engine Portico serves through this API samples with top-k)", 'top_k');
    const th = req.thinking;
    if (th?.type === 'enabled') {
      if (th.budget_tokens === undefined) throw bad("Missing required parameter: 'thinking.budget_tokens'.", 'thinking.budget_tokens', 'missing_required_parameter');
      if (th.budget_tokens >= req.max_tokens) throw bad("'thinking.budget_tokens' must be less than 'max_tokens'.", 'thinking.budget_tokens');
    }
    const { spec, engine, model, route, conv } = await this.conversation(req, key, facts);
    const gen: GenerateRequest = {
      ...conv,
      maxOutputTokens: req.max_tokens,
      temperature: req.temperature,
      topP: req.top_p,
      stop: req.stop_sequences,
      route,
    };
    // a JSON answer is folded whole: an upstream may answer in one piece (GenerateRequest.stream)
    if (req.stream !== true) gen.stream = false;
    return {
      id: messageId(),
      key,
      requestId,
      spec,
      engine,
      stream: req.stream === true,
      maxTokens: req.max_tokens,
      gen,
      count: { model, messages: conv.messages, tools: conv.tools },
      facts,
      route,
    };
  }

  /** POST /v1/messages/count_tokens: the engine and the conversation it counts, or the body it forwards */
  async prepareCount(
    req: CountTokensRequest,
    key: KeyPrincipal,
    facts?: RequestFacts,
    ctx: RequestContext = {},
  ): Promise<{
    engine: TextEngine;
    count: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>;
    forward?: Record<string, unknown>;
    betas?: readonly string[];
    route?: RouteNote;
  }> {
    const fwd = await this.forwarding(req, key, ctx, true, facts);
    if (fwd) return { engine: fwd.engine, count: fwd.count, forward: fwd.forward, betas: fwd.betas, route: fwd.route };
    if (req.thinking?.type === 'enabled' && req.thinking.budget_tokens === undefined)
      throw bad("Missing required parameter: 'thinking.budget_tokens'.", 'thinking.budget_tokens', 'missing_required_parameter');
    const { engine, model, conv } = await this.conversation(req, key, facts);
    return { engine, count: { model, messages: conv.messages, tools: conv.tools } };
  }

  /** What both endpoints share: the model, its engine, and the conversation, tools, reasoning and format as the engine's. */
  private async conversation(req: CountTokensRequest, key: KeyPrincipal, facts?: RequestFacts) {
    // (resolved once more: ./forwarding.ts looked at it first; a lookup in a map)
    const spec = resolveModel(this.d.models, req.model, 'text', key, facts);
    if (req.speed === 'fast') throw unsupported("'speed: fast'", 'speed');
    const messages = toChatMessages(req.system, req.messages);
    const { tools, toolChoice, parallel } = checkTools(req);
    let reasoningEffort: string | undefined;
    const effort = req.output_config?.effort;
    if (effort === 'xhigh' || effort === 'max') throw unsupported(`'output_config.effort: ${effort}' (the engines take low, medium and high)`, 'output_config.effort');
    if (effort) reasoningEffort = effort;
    else if (req.thinking?.type === 'enabled') reasoningEffort = effortOfBudget(req.thinking.budget_tokens!);
    let format: TextFormat | undefined;
    const f = req.output_config?.format;
    if (f) format = { type: 'json_schema', name: 'output', schema: f.schema as Record<string, unknown>, strict: true };
    const engine = await resolveEngine(() => this.d.engines.text(spec), facts);
    const model = upstreamName(spec);
    const route: RouteNote = {};
    if (facts) facts.route = route;
    const conv: GenerateRequest = {
      model,
      messages,
      // the budget as the client named it, for an upstream that takes a budget (the effort above for the others)
      ...(req.thinking?.type === 'enabled' ? { reasoningBudget: req.thinking.budget_tokens } : {}),
      tools: toolChoice === 'none' || tools.length === 0 ? undefined : tools,
      toolChoice: tools.length ? toolChoice : undefined,
      parallelToolCalls: tools.length ? parallel : undefined,
      format,
      reasoningEffort,
    };
    return { spec, engine, model, route, conv };
  }
}

/** tools (client tools only, unique names) and tool_choice as the engines' */
function checkTools(req: CountTokensRequest): { tools: FunctionTool[]; toolChoice: ToolChoice; parallel: boolean } {
  const names = new Set<string>();
  const tools: FunctionTool[] = (req.tools ?? []).map((t, i) => {
    if (t.type != null && t.type !== 'custom') throw unsupported(`The server tool '${t.type}'`, `tools[${i}].type`);
    if (!t.input_schema) throw bad(`Missing required parameter: 'tools[${i}].input_schema'.`, `tools[${i}].input_schema`, 'missing_required_parameter');
    if (names.has(t.name)) throw bad(`tools: the name '${t.name}' is used twice; tool names must be unique.`, `tools[${i}].name`);
    names.add(t.name);
    return { name: t.name, description: t.description, parameters: t.input_schema as Record<string, unknown>, strict: t.strict };
  });
  const tc = req.tool_choice;
  if (tc && tc.type !== 'auto' && tc.type !== 'none' && tools.length === 0) throw bad(`'tool_choice' of type '${tc.type}' needs 'tools'.`, 'tool_choice.type');
  if (tc?.type === 'tool') {
    if (!tc.name) throw bad("Missing required parameter: 'tool_choice.name'.", 'tool_choice.name', 'missing_required_parameter');
    if (!names.has(tc.name)) throw bad(`'tool_choice.name' '${tc.name}' is not one of the tools.`, 'tool_choice.name');
  } else if (tc?.name !== undefined) throw bad(`'tool_choice.name' goes with type 'tool' only.`, 'tool_choice.name', 'unknown_parameter');
  if (tc?.type === 'none' && tc.disable_parallel_tool_use !== undefined)
    throw bad("'tool_choice.disable_parallel_tool_use' does not go with type 'none'.", 'tool_choice.disable_parallel_tool_use', 'unknown_parameter');
  const toolChoice: ToolChoice = !tc || tc.type === 'auto' ? 'auto' : tc.type === 'none' ? 'none' : tc.type === 'any' ? 'required' : { type: 'function', name: tc.name! };
  return { tools, toolChoice, parallel: tc?.disable_parallel_tool_use !== true };
}

const TEXT_ONLY = 'text';

/** a text block's checks (citations are a document feature Portico does not have) */
function textOf(b: ContentBlockParam, at: string): string {
  if (typeof b.text !== 'string') throw bad(`Missing required parameter: '${at}.text'.`, `${at}.text`, 'missing_required_parameter');
  if (b.citations != null && b.citations.length > 0) throw unsupported('Citations', `${at}.citations`);
  return b.text;
}

const IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];

/** an image block as the engines' image part: base64 as a data URL, a URL as it is */
function imageOf(b: ContentBlockParam, at: string): ChatContentPart {
  const s = b.source;
  if (!s) throw bad(`Missing required parameter: '${at}.source'.`, `${at}.source`, 'missing_required_parameter');
  if (s.type === 'base64') {
    if (s.media_type !== undefined && !IMAGE_TYPES.includes(s.media_type))
      throw bad(`'${at}.source.media_type' must be one of ${IMAGE_TYPES.join(', ')}.`, `${at}.source.media_type`);
    if (!s.media_type || typeof s.data !== 'string' || s.data === '')
      throw bad(`An image of source type 'base64' needs 'media_type' and 'data'.`, `${at}.source`, 'missing_required_parameter');
    return { type: 'image_url', url: `data:${s.media_type};base64,${s.data}` };
  }
  if (s.type === 'url') {
    if (!s.url) throw bad(`Missing required parameter: '${at}.source.url'.`, `${at}.source.url`, 'missing_required_parameter');
    return { type: 'image_url', url: s.url };
  }
  if (s.type === 'file') throw unsupported("An image of source type 'file' (the Files API)", `${at}.source.type`);
  throw bad(`'${at}.source.type' must be one of base64, url, file.`, `${at}.source.type`);
}

/** the fields each block type may have besides `type` and `cache_control` */
const BLOCK_FIELDS: Record<string, readonly string[]> = {
  text: ['text', 'citations'],
  image: ['source'],
  tool_use: ['id', 'name', 'input', 'caller'],
  tool_result: ['tool_use_id', 'content', 'is_error'],
  thinking: ['thinking', 'signature'],
};

/** the blocks each role may send */
const ROLE_BLOCKS: Record<string, readonly string[]> = {
  user: ['text', 'image', 'tool_result'],
  assistant: ['text', 'tool_use', 'thinking'],
  system: ['text'],
};

function checkBlock(b: ContentBlockParam, role: string, at: string): void {
  const fields = BLOCK_FIELDS[b.type];
  if (!fields) throw unsupported(`A content block of type '${b.type}'`, `${at}.type`);
  if (!ROLE_BLOCKS[role]!.includes(b.type)) throw bad(`A '${role}' message cannot hold a '${b.type}' block.`, `${at}.type`);
  for (const [k, v] of Object.entries(b)) {
    if (v === undefined || k === 'type' || k === 'cache_control') continue;
    if (!fields.includes(k)) throw bad(`Invalid parameter: '${k}' is not a field of a '${b.type}' block.`, `${at}.${k}`, 'unknown_parameter');
  }
}

/**
 * system and messages as the engines' conversation. A user message's tool_result blocks become tool messages
 * (before its other blocks, as Anthropic requires them first); an assistant message's tool_use blocks become its
 * tool calls and its thinking its reasoning. Every tool_use is answered by a tool_result of the next message, and a
 * tool_result answers a tool_use of the message before it (Anthropic's rules, which the engines rely on too).
 */
export function toChatMessages(system: CountTokensRequest['system'], messages: readonly MessageParam[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined) {
    const text = typeof system === 'string' ? system : system.map((b, i) => textOf(b as ContentBlockParam, `system[${i}]`)).join('\n\n');
    if (text !== '') out.push({ role: 'system', content: text });
  }
  if (messages.length === 0) throw bad("'messages' must hold at least one message.", 'messages');
  let open = new Map<string, string>();
  let openAt = -1;
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    const blocks: ContentBlockParam[] = typeof m.content === 'string' ? [{ type: TEXT_ONLY, text: m.content }] : m.content;
    if (typeof m.content !== 'string') blocks.forEach((b, j) => checkBlock(b, m.role, `${at}.content[${j}]`));
    if (typeof m.content !== 'string' && blocks.length === 0 && m.role !== 'assistant') throw bad(`'${at}.content' is empty: a message needs at least one block.`, `${at}.content`);
    const answered = new Set<string>();
    if (m.role === 'system') {
      out.push({ role: 'system', content: blocks.map((b, j) => textOf(b, `${at}.content[${j}]`)).join('\n\n') });
    } else if (m.role === 'user') {
      const parts: ChatContentPart[] = [];
      blocks.forEach((b, j) => {
        const bat = `${at}.content[${j}]`;
        if (b.type === 'tool_result') {
          const id = b.tool_use_id;
          if (!id) throw bad(`Missing required parameter: '${bat}.tool_use_id'.`, `${bat}.tool_use_id`, 'missing_required_parameter');
          if (!open.has(id)) throw bad(`'${bat}.tool_use_id' '${id}' answers no tool_use block of the assistant message just before it.`, `${bat}.tool_use_id`);
          if (parts.length) throw bad(`tool_result blocks come first in a user message, before any other block.`, bat);
          answered.add(id);
          out.push({ role: 'tool', toolCallId: id, name: open.get(id), content: toolResultText(b, bat) });
        } else if (b.type === 'image') parts.push(imageOf(b, bat));
        else parts.push({ type: 'text', text: textOf(b, bat) });
      });
      if (parts.length) out.push({ role: 'user', content: parts.length === 1 && parts[0]!.type === 'text' ? parts[0]!.text : parts });
    }
    const missing = [...open.keys()].filter((id) => !answered.has(id));
    if (missing.length)
      throw bad(`The tool_use blocks of messages[${openAt}] need a tool_result each in the message after it; unanswered: ${missing.join(', ')}.`, `messages[${openAt}].content`);
    open = new Map();
    if (m.role === 'assistant') {
      let text = '';
      let reasoning = '';
      const calls: NonNullable<ChatMessage['toolCalls']> = [];
      blocks.forEach((b, j) => {
        const bat = `${at}.content[${j}]`;
        if (b.type === 'text') text += textOf(b, bat);
        else if (b.type === 'thinking') {
          if (typeof b.thinking !== 'string') throw bad(`Missing required parameter: '${bat}.thinking'.`, `${bat}.thinking`, 'missing_required_parameter');
          reasoning += b.thinking;
        } else {
          if (!b.id || !b.name) throw bad(`A tool_use block needs 'id' and 'name'.`, `${bat}`, 'missing_required_parameter');
          if (b.input === null || typeof b.input !== 'object' || Array.isArray(b.input)) throw bad(`'${bat}.input' must be an object.`, `${bat}.input`, 'invalid_type');
          if (open.has(b.id)) throw bad(`The tool_use id '${b.id}' is used twice.`, `${bat}.id`);
          open.set(b.id, b.name);
          calls.push({ callId: b.id, name: b.name, arguments: JSON.stringify(b.input) });
        }
      });
      const msg: ChatMessage = { role: 'assistant', content: text };
      if (calls.length) msg.toolCalls = calls;
      if (reasoning) msg.reasoning = reasoning;
      out.push(msg);
      openAt = i;
    }
  });
  if (open.size > 0) throw bad(`The tool_use blocks of messages[${openAt}] need a tool_result each in a user message after it.`, `messages[${openAt}].content`);
  const last = messages[messages.length - 1]!;
  // Anthropic continues a final assistant turn (prefill); the engines answer a conversation, they do not continue one
  if (last.role === 'assistant') throw unsupported('A final assistant message (a prefilled answer)', `messages[${messages.length - 1}]`);
  return out;
}

/** a tool_result's content as the tool message's text (is_error says so in words: the engines have no flag for it) */
function toolResultText(b: ContentBlockParam, at: string): string {
  let text = '';
  const c = b.content;
  if (typeof c === 'string') text = c;
  else if (Array.isArray(c)) {
    c.forEach((x, k) => {
      const inner = x as ContentBlockParam;
      if (inner.type !== 'text') throw unsupported(`A '${String(inner.type)}' block inside a tool_result`, `${at}.content[${k}].type`);
      for (const key of Object.keys(inner)) {
        if (key !== 'type' && key !== 'text' && key !== 'cache_control' && key !== 'citations')
          throw bad(`Invalid parameter: '${key}' is not a field of a 'text' block.`, `${at}.content[${k}].${key}`, 'unknown_parameter');
      }
      text += (text ? '\n' : '') + textOf(inner, `${at}.content[${k}]`);
    });
  }
  return b.is_error === true ? `Error: ${text}` : text;
}
