/**
 * GenerateRequest -> the body of Anthropic's Messages API (POST /v1/messages).
 *
 * What Anthropic cannot do is refused here, before any call, with a 400 `unsupported_parameter` that names the
 * parameter (never dropped without a word): presence and frequency penalties, a seed, a temperature above 1, an
 * image at `detail: low`, a participant `name`. Structured output (a JSON schema, or JSON mode) has no parameter of
 * its own in the Messages API: as LiteLLM does, it is one more tool the model is made to call, whose input is the
 * answer (the decoder turns that call back into text).
 */
import { EngineError, type ChatContentPart, type ChatMessage, type FunctionTool, type GenerateRequest } from '../types.js';
import { toolArgsObject } from '../shared/tool-args.js';

export interface MessagesOptions {
  /** max_tokens when the request names none (Anthropic requires one) */
  maxTokens: number;
  /** cache_control breakpoints on the system prompt and the last turn (prompt caching) */
  cachePrompt: boolean;
}

/** the tool structured output is asked through (its name is the format's, so the model sees what it writes) */
export interface FormatTool {
  name: string;
}

export interface MessagesBody {
  body: Record<string, unknown>;
  /** set when the answer comes as the input of this tool (structured output) */
  formatTool?: FormatTool;
}

/** reasoning effort -> thinking budget in tokens (LiteLLM's figures; 1024 is Anthropic's least) */
export const THINKING_BUDGET: Readonly<Record<string, number>> = { minimal: 1024, low: 1024, medium: 2048, high: 4096, xhigh: 8192 };
const MIN_BUDGET = 1024;

const unsupported = (message: string) => new EngineError(message, 'unsupported_parameter', 400);
const invalid = (message: string) => new EngineError(message, 'invalid_value', 400);

/** data:<media type>;base64,<data>: the four image types Anthropic reads */
const DATA_URL = /^data:(image\/(?:jpeg|png|gif|webp));base64,(.*)$/s;

function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  let s = '';
  for (const p of content) if (p.type === 'text') s = s ? s + '\n' + p.text : p.text;
  return s;
}

function imageBlock(p: Extract<ChatContentPart, { type: 'image_url' }>, at: string): Record<string, unknown> {
  // Claude reads every image at its own full resolution: `high` and `auto` are what it does, `low` it cannot
  if (p.detail === 'low') throw unsupported(`${at}: an image at detail 'low' is not supported by this model (Anthropic reads images at full resolution); send 'auto' or 'high'.`);
  const m = DATA_URL.exec(p.url);
  if (m) return { type: 'image', source: { type: 'base64', media_type: m[1], data: m[2] } };
  if (/^https?:\/\//i.test(p.url)) return { type: 'image', source: { type: 'url', url: p.url } };
  if (p.url.startsWith('data:')) throw unsupported(`${at}: this model reads base64 images of type image/jpeg, image/png, image/gif or image/webp only.`);
  throw unsupported(`${at}: this model reads images given as a data: URL (base64) or an http(s) URL only.`);
}

function blocks(content: ChatMessage['content'], at: string): Record<string, unknown>[] {
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  const out: Record<string, unknown>[] = [];
  content.forEach((p, i) => {
    if (p.type === 'text') {
      // Anthropic refuses an empty text block
      if (p.text) out.push({ type: 'text', text: p.text });
    } else out.push(imageBlock(p, `${at}.content[${i}]`));
  });
  return out;
}

const toolInput = (args: string, at: string) => toolArgsObject(args, at, "Anthropic keeps a call's input as an object");

/**
 * The conversation as Anthropic's `system` and `messages`: system and developer messages make the system prompt
 * (in order), tool outputs are tool_result blocks of a user turn, assistant tool calls are tool_use blocks, and
 * turns of the same role are merged into one (Anthropic alternates user and assistant).
 */
export function anthropicMessages(messages: readonly ChatMessage[]): { system: string[]; turns: Array<{ role: 'user' | 'assistant'; content: Record<string, unknown>[] }> } {
  const system: string[] = [];
  const turns: Array<{ role: 'user' | 'assistant'; content: Record<string, unknown>[] }> = [];
  const push = (role: 'user' | 'assistant', content: Record<string, unknown>[]) => {
    if (content.length === 0) return;
    const last = turns[turns.length - 1];
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content });
  };
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (m.name !== undefined && m.role !== 'tool') throw unsupported(`${at}.name: a participant name is not supported by this model (Anthropic's messages have none).`);
    switch (m.role) {
      case 'system':
      case 'developer': {
        const t = textOf(m.content);
        if (typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text')) throw unsupported(`${at}: this model takes text only in system and developer messages.`);
        if (t) system.push(t);
        break;
      }
      case 'user':
        push('user', blocks(m.content, at));
        break;
      case 'assistant': {
        // reasoning is not sent back: Anthropic takes back only the thinking blocks it signed, which are not kept
        const content = blocks(m.content, at);
        m.toolCalls?.forEach((c, j) => content.push({ type: 'tool_use', id: c.callId, name: c.name, input: toolInput(c.arguments, `${at}.tool_calls[${j}]`) }));
        push('assistant', content);
        break;
      }
      case 'tool': {
        const r: Record<string, unknown> = { type: 'tool_result', tool_use_id: m.toolCallId ?? '' };
        const c = blocks(m.content, at);
        // text only: a plain string, as Anthropic's own examples send it; with images, the blocks
        if (c.length > 0) r.content = c.every((b) => b.type === 'text') ? c.map((b) => b.text as string).join('\n') : c;
        push('user', [r]);
        break;
      }
    }
  });
  return { system, turns };
}

/** A tool name Anthropic takes (^[a-zA-Z0-9_-]{1,64}$), made of the format's name. */
function formatToolName(name: string, taken: ReadonlySet<string>): string {
  let n = name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 64) || 'json_answer';
  while (taken.has(n)) n = ('_' + n).slice(0, 64);
  return n;
}

function toolOf(t: FunctionTool): Record<string, unknown> {
  const o: Record<string, unknown> = { name: t.name, input_schema: t.parameters ?? { type: 'object', properties: {} } };
  if (t.description !== undefined) o.description = t.description;
  if (t.strict !== undefined) o.strict = t.strict;
  return o;
}

export function buildMessagesBody(req: GenerateRequest, opts: MessagesOptions): MessagesBody {
  if (req.presencePenalty !== undefined) throw unsupported("'presence_penalty' is not supported by this model (Anthropic's Messages API has no penalties).");
  if (req.frequencyPenalty !== undefined) throw unsupported("'frequency_penalty' is not supported by this model (Anthropic's Messages API has no penalties).");
  if (req.seed !== undefined) throw unsupported("'seed' is not supported by this model (Anthropic's Messages API has no sampling seed).");
  if (req.temperature !== undefined && req.temperature > 1) throw unsupported(`'temperature' ${req.temperature} is not supported by this model: Anthropic takes 0 to 1.`);

  const { system, turns } = anthropicMessages(req.messages);
  const body: Record<string, unknown> = { model: req.model };

  // reasoning: extended thinking with a budget, which max_tokens must exceed
  const effort = req.reasoningEffort;
  let budget: number | undefined;
  if (effort !== undefined && effort !== 'none') {
    budget = req.reasoningBudget ?? THINKING_BUDGET[effort];
    if (budget === undefined) throw unsupported(`reasoning effort '${effort}' is not supported by this model; use one of ${Object.keys(THINKING_BUDGET).join(', ')} or none.`);
  }
  let maxTokens = req.maxOutputTokens ?? opts.maxTokens;
  if (budget !== undefined) {
    if (req.maxOutputTokens === undefined) maxTokens = opts.maxTokens + budget;
    else {
      // the client's cap counts the thinking too (as OpenAI's max_output_tokens counts reasoning): it bounds the budget
      budget = Math.min(budget, maxTokens - 1);
      if (budget < MIN_BUDGET) {
        throw invalid(`reasoning on this model needs a token cap above ${MIN_BUDGET} (Anthropic's least thinking budget); the cap was ${maxTokens}.`);
      }
    }
    body.thinking = { type: 'enabled', budget_tokens: budget };
  }
  body.max_tokens = maxTokens;
  if (system.length) body.system = opts.cachePrompt ? [{ type: 'text', text: system.join('\n\n'), cache_control: { type: 'ephemeral' } }] : system.join('\n\n');
  if (opts.cachePrompt) {
    // the second breakpoint: everything up to the last turn is cached for the next request of the conversation
    const last = turns[turns.length - 1]?.content;
    const block = last?.[last.length - 1];
    if (block) last![last!.length - 1] = { ...block, cache_control: { type: 'ephemeral' } };
  }
  body.messages = turns;

  const tools = req.tools?.map(toolOf) ?? [];
  const tc = req.toolChoice;
  let choice: Record<string, unknown> | undefined =
    tc === undefined ? undefined : tc === 'auto' ? { type: 'auto' } : tc === 'none' ? { type: 'none' } : tc === 'required' ? { type: 'any' } : { type: 'tool', name: tc.name };

  let formatTool: FormatTool | undefined;
  const f = req.format;
  if (f && f.type !== 'text') {
    if (budget !== undefined) {
      throw unsupported(
        'Structured output (response_format, text.format) with reasoning is not supported by this model: Anthropic has no JSON output parameter, it is asked as a forced tool call, which Anthropic refuses with extended thinking. Leave out one of them.',
      );
    }
    const schema = f.type === 'json_schema' ? f.schema : { type: 'object' };
    if (schema.type !== 'object') throw unsupported("Structured output on this model needs a JSON schema whose root is an object ('type': 'object').");
    const name = formatToolName(f.type === 'json_schema' ? f.name : 'json_answer', new Set(tools.map((t) => t.name as string)));
    const ft: Record<string, unknown> = {
      name,
      description: (f.type === 'json_schema' && f.description) || 'Give the answer as the input of this tool: it is the JSON object the user asked for.',
      input_schema: schema,
    };
    if (f.type === 'json_schema' && f.strict !== undefined) ft.strict = f.strict;
    formatTool = { name };
    if (tools.length === 0 || tc === 'none') {
      tools.length = 0;
      choice = { type: 'tool', name };
    } else if (tc === undefined || tc === 'auto' || tc === 'required') {
      // a tool call or the answer: either way some tool is called
      choice = { type: 'any' };
    }
    tools.push(ft);
  }
  if (tools.length) {
    body.tools = tools;
    if (req.parallelToolCalls === false || req.maxToolCalls === 1) {
      choice = { ...(choice ?? { type: 'auto' }), disable_parallel_tool_use: true };
      if (choice.type === 'none') delete choice.disable_parallel_tool_use;
    }
    if (choice) body.tool_choice = choice;
  }

  if (req.stop?.length) body.stop_sequences = req.stop;
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.topP !== undefined) body.top_p = req.topP;
  if (req.stream !== false) body.stream = true;
  return formatTool ? { body, formatTool } : { body };
}
