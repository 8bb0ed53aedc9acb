/**
 * GenerateRequest -> the body of Bedrock's Converse API (POST /model/{modelId}/converse and /converse-stream; the
 * model is in the path, never in the body). Shapes: @aws-sdk/client-bedrock-runtime's ConverseRequest.
 *
 * What Converse cannot do is refused here, before any call, with a 400 `unsupported_parameter` naming the
 * parameter: presence and frequency penalties, a seed, a participant `name`, an image by http(s) URL (Converse
 * takes image bytes only), an image at `detail: low`, reasoning on a model that is not Anthropic's (the thinking
 * budget is Claude's own additionalModelRequestFields). Structured output has no parameter in Converse: as the
 * anthropic provider does, it is one more tool the model is made to call, whose input is the answer.
 */
import { EngineError, type ChatContentPart, type ChatMessage, type FunctionTool, type GenerateRequest } from '../types.js';
import { toolArgsObject } from '../shared/tool-args.js';

export interface ConverseOptions {
  /** maxTokens when reasoning is asked and the request names no cap (the budget is added to it) */
  maxTokens: number;
}

export interface FormatTool {
  name: string;
}

export interface ConverseBody {
  body: Record<string, unknown>;
  formatTool?: FormatTool;
}

/** reasoning effort -> Claude's thinking budget in tokens (the anthropic provider's figures) */
export const THINKING_BUDGET: Readonly<Record<string, number>> = { minimal: 1024, low: 1024, medium: 2048, high: 4096, xhigh: 8192 };
const MIN_BUDGET = 1024;

const unsupported = (message: string) => new EngineError(message, 'unsupported_parameter', 400);
const invalid = (message: string) => new EngineError(message, 'invalid_value', 400);

/** data:<type>;base64,<data>: Converse's four image formats */
const DATA_URL = /^data:image\/(jpeg|png|gif|webp);base64,(.*)$/s;

/** Claude on Bedrock: model ids (or inference profiles) naming anthropic, e.g. us.anthropic.claude-sonnet-4-5-v1:0 */
export const isAnthropicModel = (modelId: string) => /(^|[.:/])anthropic\./.test(modelId);

type Block = Record<string, unknown>;

function blocks(content: ChatMessage['content'], at: string): Block[] {
  if (typeof content === 'string') return content ? [{ text: content }] : [];
  const out: Block[] = [];
  content.forEach((p: ChatContentPart, i) => {
    if (p.type === 'text') {
      // Converse refuses a blank text block
      if (p.text) out.push({ text: p.text });
      return;
    }
    const where = `${at}.content[${i}]`;
    if (p.detail === 'low') throw unsupported(`${where}: an image at detail 'low' is not supported by this model (Bedrock's Converse has no image detail); send 'auto' or 'high'.`);
    const m = DATA_URL.exec(p.url);
    if (m) {
      out.push({ image: { format: m[1], source: { bytes: m[2] } } });
      return;
    }
    if (/^https?:\/\//i.test(p.url))
      throw unsupported(`${where}: an image by URL is not supported by this model (Bedrock's Converse takes image bytes only); send it as a data: URL (base64).`);
    throw unsupported(`${where}: this model reads base64 images (data: URL) of type image/jpeg, image/png, image/gif or image/webp only.`);
  });
  return out;
}

const toolInput = (args: string, at: string) => toolArgsObject(args, at, "Converse keeps a call's input as an object");

/**
 * The conversation as Converse's `system` and `messages`: system and developer messages are system blocks, tool
 * outputs are toolResult blocks of a user turn, assistant calls toolUse blocks, and consecutive turns of the same
 * role are merged (Converse alternates user and assistant).
 */
export function converseMessages(messages: readonly ChatMessage[]): { system: Block[]; turns: Array<{ role: 'user' | 'assistant'; content: Block[] }>; hasTools: boolean } {
  const system: Block[] = [];
  const turns: Array<{ role: 'user' | 'assistant'; content: Block[] }> = [];
  let hasTools = false;
  const push = (role: 'user' | 'assistant', content: Block[]) => {
    if (content.length === 0) return;
    const last = turns[turns.length - 1];
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content });
  };
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (m.name !== undefined && m.role !== 'tool') throw unsupported(`${at}.name: a participant name is not supported by this model (Converse's messages have none).`);
    switch (m.role) {
      case 'system':
      case 'developer': {
        if (typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text')) throw unsupported(`${at}: this model takes text only in system and developer messages.`);
        const t = typeof m.content === 'string' ? m.content : m.content.map((p) => (p.type === 'text' ? p.text : '')).join('\n');
        if (t) system.push({ text: t });
        break;
      }
      case 'user':
        push('user', blocks(m.content, at));
        break;
      case 'assistant': {
        // reasoning is not sent back: Claude takes back only the thinking it signed, which is not kept
        const content = blocks(m.content, at);
        m.toolCalls?.forEach((c, j) => {
          hasTools = true;
          content.push({ toolUse: { toolUseId: c.callId, name: c.name, input: toolInput(c.arguments, `${at}.tool_calls[${j}]`) } });
        });
        push('assistant', content);
        break;
      }
      case 'tool': {
        hasTools = true;
        const c = blocks(m.content, at);
        push('user', [{ toolResult: { toolUseId: m.toolCallId ?? '', content: c.length ? c : [{ text: '' }] } }]);
        break;
      }
    }
  });
  return { system, turns, hasTools };
}

/** A tool name Converse takes ([a-zA-Z0-9_-]{1,64}), made of the format's name. */
function formatToolName(name: string, taken: ReadonlySet<string>): string {
  let n = name.replace(/[^a-zA-Z0-9_-]/g, '_').slice(0, 64) || 'json_answer';
  while (taken.has(n)) n = ('_' + n).slice(0, 64);
  return n;
}

function toolSpec(t: FunctionTool): Block {
  const spec: Record<string, unknown> = { name: t.name, inputSchema: { json: t.parameters ?? { type: 'object', properties: {} } } };
  if (t.description !== undefined) spec.description = t.description;
  return { toolSpec: spec };
}

export function buildConverseBody(req: GenerateRequest, opts: ConverseOptions): ConverseBody {
  if (req.presencePenalty !== undefined) throw unsupported("'presence_penalty' is not supported by this model (Bedrock's Converse API has no penalties).");
  if (req.frequencyPenalty !== undefined) throw unsupported("'frequency_penalty' is not supported by this model (Bedrock's Converse API has no penalties).");
  if (req.seed !== undefined) throw unsupported("'seed' is not supported by this model (Bedrock's Converse API has no sampling seed).");

  const { system, turns, hasTools } = converseMessages(req.messages);
  const body: Record<string, unknown> = { messages: turns };
  if (system.length) body.system = system;

  const effort = req.reasoningEffort;
  let budget: number | undefined;
  if (effort !== undefined && effort !== 'none') {
    if (!isAnthropicModel(req.model)) {
      throw unsupported(
        `'reasoning' is not supported by this model: Portico asks Bedrock for reasoning through Claude's thinking budget, and '${req.model}' is not an Anthropic model.`,
      );
    }
    budget = req.reasoningBudget ?? THINKING_BUDGET[effort];
    if (budget === undefined) throw unsupported(`reasoning effort '${effort}' is not supported by this model; use one of ${Object.keys(THINKING_BUDGET).join(', ')} or none.`);
  }
  const inference: Record<string, unknown> = {};
  let maxTokens = req.maxOutputTokens;
  if (budget !== undefined) {
    if (maxTokens === undefined) maxTokens = opts.maxTokens + budget;
    else {
      // the client's cap counts the thinking too: it bounds the budget
      budget = Math.min(budget, maxTokens - 1);
      if (budget < MIN_BUDGET) throw invalid(`reasoning on this model needs a token cap above ${MIN_BUDGET} (Claude's least thinking budget); the cap was ${maxTokens}.`);
    }
    body.additionalModelRequestFields = { thinking: { type: 'enabled', budget_tokens: budget } };
  }
  if (maxTokens !== undefined) inference.maxTokens = maxTokens;
  if (req.temperature !== undefined) inference.temperature = req.temperature;
  if (req.topP !== undefined) inference.topP = req.topP;
  if (req.stop?.length) inference.stopSequences = req.stop;
  if (Object.keys(inference).length) body.inferenceConfig = inference;

  const tc = req.toolChoice;
  const tools = tc === 'none' ? [] : (req.tools?.map(toolSpec) ?? []);
  // Converse has no tool choice 'none': the tools are not sent, which a conversation that used tools does not allow
  if (tc === 'none' && hasTools && req.tools?.length) {
    throw unsupported(
      "'tool_choice' none is not supported by this model in a conversation with tool calls (Bedrock's Converse has no 'none' choice and needs the tools declared there).",
    );
  }
  let choice: Record<string, unknown> | undefined =
    tc === undefined || tc === 'none' ? undefined : tc === 'auto' ? { auto: {} } : tc === 'required' ? { any: {} } : { tool: { name: tc.name } };

  let formatTool: FormatTool | undefined;
  const f = req.format;
  if (f && f.type !== 'text') {
    if (budget !== undefined) {
      throw unsupported(
        'Structured output (response_format, text.format) with reasoning is not supported by this model: Converse has no JSON output parameter, it is asked as a forced tool call, which Claude refuses with extended thinking. Leave out one of them.',
      );
    }
    const schema = f.type === 'json_schema' ? f.schema : { type: 'object' };
    if (schema.type !== 'object') throw unsupported("Structured output on this model needs a JSON schema whose root is an object ('type': 'object').");
    const name = formatToolName(f.type === 'json_schema' ? f.name : 'json_answer', new Set(tools.map((t) => (t.toolSpec as { name: string }).name)));
    const description = (f.type === 'json_schema' && f.description) || 'Give the answer as the input of this tool: it is the JSON object the user asked for.';
    formatTool = { name };
    if (tools.length === 0) choice = { tool: { name } };
    else if (tc === undefined || tc === 'auto' || tc === 'required') choice = { any: {} };
    tools.push({ toolSpec: { name, description, inputSchema: { json: schema } } });
  }
  if (tools.length) body.toolConfig = choice ? { tools, toolChoice: choice } : { tools };
  return formatTool ? { body, formatTool } : { body };
}
