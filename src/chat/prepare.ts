/**
 * Everything decided before a chat completion runs: the model and its engine (looked up as the Responses API
 * does: models.require, then engines.text, so routing around that lookup applies here too), the rules across
 * parameters, and which way it runs:
 * - forward: the engine speaks Chat Completions itself (TextEngine.chatCompletions, an upstream): the body is
 *   sent as the client sent it, the model name mapped, usage always asked for in a stream;
 * - generate: the engine generates (the embedded llama engine, an upstream speaking only the Responses API): the
 *   request becomes a GenerateRequest, and what that engine cannot do is refused with a 400 naming it.
 */
import { randomBytes } from 'node:crypto';
import { AppError, type ErrorCode, type ValidationDetail } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { FunctionTool, GenerateRequest, RouteNote, TextEngine, TextFormat, ToolChoice } from '../engines/types.js';
import type { TextEngineSource } from '../engines/registry.js';
import type { ModelRegistry } from '../models/registry.js';
import { upstreamName, type ModelSpec } from '../models/spec.js';
import { resolveEngine, resolveModel } from '../api/metering.js';
import { checkMessages, checkToolTurns, toChatMessages } from './messages.js';
import { generatingDeployment, unknownFields } from './forwarding.js';
import type { ChatCompletionRequest } from './schemas.js';

export interface PreparedChat {
  /** the id of a generated completion (a forwarded one keeps the upstream's) */
  id: string;
  req: ChatCompletionRequest;
  key: KeyPrincipal;
  requestId: string;
  spec: ModelSpec;
  engine: TextEngine;
  stream: boolean;
  /** stream_options.include_usage: the client wants the usage chunk */
  includeUsage: boolean;
  /** forward: the body sent to the upstream */
  forward?: Record<string, unknown>;
  /** generate: the engine's request */
  gen?: GenerateRequest;
  /** what the conversation is, for a token estimate when an answer ends without the engine's count (built when needed) */
  count: () => Pick<GenerateRequest, 'model' | 'messages' | 'tools'>;
  /** the request's facts (model, deployment, engine time, tokens, failure), for its log line and metrics */
  facts?: RequestFacts;
  /** filled by the router: the deployment that served (the usage record names it) */
  route: RouteNote;
}

export interface ChatPrepareDeps {
  models: ModelRegistry;
  engines: TextEngineSource;
}

function bad(message: string, param: string | null, code: ErrorCode = 'validation_error', detail?: ValidationDetail): AppError {
  return new AppError(code, message, param, detail ? { detail } : {});
}

const unsupported = (what: string, param: string) => bad(`${what} is not supported by this model's engine.`, param, 'unsupported_parameter');

/** chatcmpl- + 29 base62 characters, as OpenAI's ids look */
export function completionId(): string {
  const b = randomBytes(29);
  const abc = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let s = 'chatcmpl-';
  for (const x of b) s += abc[x % 62];
  return s;
}

export class ChatPreparer {
  constructor(private readonly d: ChatPrepareDeps) {}

  async prepare(req: ChatCompletionRequest, key: KeyPrincipal, requestId: string, facts?: RequestFacts): Promise<PreparedChat> {
    const spec = resolveModel(this.d.models, req.model, 'text', key, facts);
    const stream = req.stream === true;
    if (req.stream_options != null && !stream) {
      throw bad("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options', 'validation_error', 'invalid_value');
    }
    if (req.max_tokens != null && req.max_completion_tokens != null && req.max_tokens !== req.max_completion_tokens) {
      throw bad(
        "Set one of 'max_tokens' and 'max_completion_tokens' (max_tokens is the deprecated name of max_completion_tokens).",
        'max_tokens',
        'validation_error',
        'invalid_value',
      );
    }
    if (req.top_logprobs != null && req.top_logprobs > 0 && req.logprobs !== true) {
      throw bad("'top_logprobs' needs 'logprobs' set to true.", 'top_logprobs', 'validation_error', 'invalid_value');
    }
    checkMessages(req.messages);
    const tools = this.checkTools(req);
    if (req.parallel_tool_calls !== undefined && tools.length === 0) {
      throw bad("'parallel_tool_calls' is only allowed when 'tools' are specified.", 'parallel_tool_calls', 'validation_error', 'invalid_value');
    }
    const rf = req.response_format;
    if (rf?.type === 'json_schema' && !rf.json_schema)
      throw bad("Missing required parameter: 'response_format.json_schema'.", 'response_format.json_schema', 'validation_error', 'missing_required_parameter');
    if (rf && rf.type !== 'json_schema' && rf.json_schema)
      throw bad(`Invalid parameter: 'response_format.json_schema' goes with type 'json_schema' only.`, 'response_format.json_schema', 'validation_error', 'unknown_parameter');

    this.checkUnknownFields(req, spec);
    const engine = await resolveEngine(() => this.d.engines.text(spec), facts);
    this.checkUnknownFields(req, spec, engine);
    const model = upstreamName(spec);
    const route: RouteNote = {};
    if (facts) facts.route = route;
    const base = { id: completionId(), req, key, requestId, spec, engine, stream, includeUsage: stream && req.stream_options?.include_usage === true, facts, route };
    const fnTools: FunctionTool[] = tools.flatMap((t) =>
      t.type === 'function' && t.function
        ? [
            {
              name: t.function.name,
              description: t.function.description,
              parameters: t.function.parameters as Record<string, unknown> | undefined,
              strict: t.function.strict ?? undefined,
            },
          ]
        : [],
    );

    const count = () => ({ model, messages: toChatMessages(req.messages, false), tools: fnTools.length ? fnTools : undefined });
    if (engine.chatCompletions) {
      const forward: Record<string, unknown> = { ...req, model };
      // the usage is what the request is charged: a stream always asks for it (the client sees it only if it asked)
      if (stream) forward.stream_options = { ...(req.stream_options ?? {}), include_usage: true };
      return { ...base, forward, count };
    }
    return {
      ...base,
      gen: { ...this.generateRequest(req, model, fnTools), route },
      count,
    };
  }

  /**
   * Top-level fields that are not OpenAI parameters go to the upstream as sent, when every deployment that may
   * serve the request forwards (./forwarding.ts); otherwise the first of them is refused, naming it. Told from the
   * model file before any engine is made (an embedded model is not loaded to refuse a request); with the engine,
   * `engine` is checked too (one made by code, without a model file entry, has the last word).
   */
  private checkUnknownFields(req: ChatCompletionRequest, spec: ModelSpec, engine?: TextEngine) {
    const [field] = unknownFields(req);
    if (field === undefined) return;
    const why = `'${field}' is not a parameter of OpenAI's Chat Completions API; such fields are forwarded as sent only to upstreams that speak Chat Completions`;
    const generates = () => bad(`Unsupported parameter: ${why}, and this model's engine generates the answer itself.`, field, 'unsupported_parameter');
    if (engine) {
      if (!engine.chatCompletions) throw generates();
      return;
    }
    const gen = generatingDeployment(spec, this.d.models);
    if (!gen) return;
    if (gen.model === spec.name && (spec.deployments?.length ?? 1) <= 1) throw generates();
    const which = gen.model === spec.name ? `its deployment '${gen.deployment}'` : `'${gen.deployment}' of its fallback '${gen.model}'`;
    throw bad(
      `Unsupported parameter: ${why}, and the model '${spec.name}' may be served by ${which}, where Portico generates the answer itself (every deployment of a model and of its fallbacks must forward).`,
      field,
      'unsupported_parameter',
    );
  }

  /** tools: the shape each type needs, unique names; tool_choice names one of them */
  private checkTools(req: ChatCompletionRequest) {
    const tools = req.tools ?? [];
    const names = new Set<string>();
    tools.forEach((t, i) => {
      if (t.type === 'function' && !t.function)
        throw bad(`Missing required parameter: 'tools[${i}].function'.`, `tools[${i}].function`, 'validation_error', 'missing_required_parameter');
      if (t.type === 'custom' && !t.custom) throw bad(`Missing required parameter: 'tools[${i}].custom'.`, `tools[${i}].custom`, 'validation_error', 'missing_required_parameter');
      if (t.type === 'function' && t.custom) throw bad(`Invalid parameter: a function tool has no 'custom'.`, `tools[${i}].custom`, 'validation_error', 'unknown_parameter');
      if (t.type === 'custom' && t.function) throw bad(`Invalid parameter: a custom tool has no 'function'.`, `tools[${i}].function`, 'validation_error', 'unknown_parameter');
      const name = t.type === 'function' ? t.function!.name : String((t.custom as { name?: unknown }).name ?? '');
      if (t.type === 'custom' && !name)
        throw bad(`Missing required parameter: 'tools[${i}].custom.name'.`, `tools[${i}].custom.name`, 'validation_error', 'missing_required_parameter');
      if (names.has(name)) throw bad(`tools: the name '${name}' is used twice; tool names must be unique.`, `tools[${i}]`, 'validation_error', 'invalid_value');
      names.add(name);
    });
    const tc = req.tool_choice;
    if (tc !== undefined && tc !== 'none' && tc !== 'auto' && tools.length === 0) {
      throw bad(`'tool_choice' ${JSON.stringify(tc)} needs 'tools'.`, 'tool_choice', 'validation_error', 'invalid_value');
    }
    if (tc && typeof tc === 'object') {
      const named =
        tc.type === 'allowed_tools'
          ? (tc.allowed_tools?.tools ?? []).map((t, j) => ({ name: t.function?.name ?? t.custom?.name, at: `tool_choice.allowed_tools.tools[${j}]` }))
          : [{ name: tc.type === 'function' ? tc.function?.name : tc.custom?.name, at: `tool_choice.${tc.type}` }];
      if (tc.type === 'allowed_tools' && !tc.allowed_tools)
        throw bad("Missing required parameter: 'tool_choice.allowed_tools'.", 'tool_choice.allowed_tools', 'validation_error', 'missing_required_parameter');
      for (const n of named) {
        if (!n.name) throw bad(`Missing required parameter: '${n.at}.name'.`, `${n.at}.name`, 'validation_error', 'missing_required_parameter');
        if (!names.has(n.name)) throw bad(`Invalid value for '${n.at}.name': '${n.name}' is not one of the tools.`, `${n.at}.name`, 'validation_error', 'invalid_value');
      }
    }
    return tools;
  }

  /** The request as the engines' GenerateRequest; what a generating engine cannot do is refused, naming it. */
  private generateRequest(req: ChatCompletionRequest, model: string, fnTools: FunctionTool[]): GenerateRequest {
    if (req.n != null && req.n !== 1)
      throw bad("This model's engine answers one choice per request: 'n' must be 1 (send the request several times for more).", 'n', 'unsupported_parameter');
    if (req.logprobs === true) throw unsupported("'logprobs'", 'logprobs');
    if (req.logit_bias && Object.keys(req.logit_bias).length > 0) throw unsupported("'logit_bias'", 'logit_bias');
    if (req.modalities?.includes('audio') || req.audio) throw unsupported('Audio output', req.audio ? 'audio' : 'modalities');
    if (req.web_search_options) throw unsupported('Web search', 'web_search_options');
    if (req.moderation) throw unsupported('Moderation', 'moderation');
    if (req.functions || req.function_call) {
      throw bad(
        "'functions' and 'function_call' are deprecated and not supported by this model's engine: send 'tools' and 'tool_choice'.",
        req.functions ? 'functions' : 'function_call',
        'unsupported_parameter',
      );
    }
    (req.tools ?? []).forEach((t, i) => {
      if (t.type === 'custom') throw unsupported('A custom tool', `tools[${i}].type`);
    });
    checkToolTurns(req.messages);
    const messages = toChatMessages(req.messages, true);

    let tools = fnTools;
    let toolChoice: ToolChoice | undefined;
    const tc = req.tool_choice;
    if (tc === 'none' || tc === 'auto' || tc === 'required') toolChoice = tc;
    else if (tc?.type === 'function') toolChoice = { type: 'function', name: tc.function!.name };
    else if (tc?.type === 'custom') throw unsupported('A custom tool', 'tool_choice');
    else if (tc?.type === 'allowed_tools') {
      const allowed = new Set(tc.allowed_tools!.tools.map((t) => t.function?.name ?? t.custom?.name));
      tools = tools.filter((t) => allowed.has(t.name));
      toolChoice = tc.allowed_tools!.mode;
    }
    let format: TextFormat | undefined;
    const rf = req.response_format;
    if (rf?.type === 'json_object') format = { type: 'json_object' };
    else if (rf?.type === 'json_schema') {
      const js = rf.json_schema!;
      format = js.schema
        ? { type: 'json_schema', name: js.name, schema: js.schema as Record<string, unknown>, strict: js.strict ?? undefined, description: js.description }
        : { type: 'json_object' };
    }
    const stop = req.stop == null ? undefined : typeof req.stop === 'string' ? [req.stop] : req.stop;
    return {
      model,
      messages,
      tools: toolChoice === 'none' || tools.length === 0 ? undefined : tools,
      toolChoice: tools.length ? (toolChoice ?? 'auto') : undefined,
      parallelToolCalls: req.parallel_tool_calls ?? true,
      format,
      temperature: req.temperature ?? undefined,
      topP: req.top_p ?? undefined,
      maxOutputTokens: req.max_completion_tokens ?? req.max_tokens ?? undefined,
      stop: stop?.filter((s) => s.length > 0),
      reasoningEffort: req.reasoning_effort ?? undefined,
      seed: req.seed ?? undefined,
    };
  }
}
