/**
 * When a Messages request goes upstream as the client sent it (docs/api.md, "Anthropic Messages API"). A model
 * whose every deployment, and every deployment of every model it may fall back to, speaks Anthropic's Messages
 * API itself (Provider.forwardsMessages, TextEngine.messages) is forwarded: the body unchanged but for the model
 * name, the answer or the event stream back as the upstream wrote it. Nothing is lost to a translation (cache_control,
 * thinking signatures, documents, server tools, top_k, metadata...), and the upstream validates what Portico's
 * translation would have refused. A model with one deployment that generates is translated, whichever deployment
 * would have served: one request is forwarded or translated for the model as configured, not by the luck of the draw.
 */
import { forwardsMessages } from '../engines/providers.js';
import type { ChatMessage, FunctionTool, GenerateRequest } from '../engines/types.js';
import { servingModels, type ModelRegistry } from '../models/registry.js';
import type { ModelSpec } from '../models/spec.js';
import { AppError } from '../platform/errors.js';

/** Whether every deployment that may serve a request for `spec` forwards Anthropic's Messages API as sent. */
export function forwardsAll(spec: ModelSpec, models: ModelRegistry): boolean {
  return servingModels(spec, models).every((m) => (m.deployments ?? [m]).every((d) => forwardsMessages(d)));
}

/** the values of a beta the way Anthropic names them */
const BETA = /^[A-Za-z0-9._-]{1,128}$/;

/** The client's `anthropic-beta` header (one or several, comma-separated values): its values, or a 400 naming it. */
export function clientBetas(h: string | string[] | undefined): string[] {
  if (h === undefined) return [];
  const out: string[] = [];
  for (const line of Array.isArray(h) ? h : [h]) {
    for (const raw of line.split(',')) {
      const v = raw.trim();
      if (v === '') continue;
      if (!BETA.test(v) || out.length >= 32)
        throw new AppError('validation_error', "The 'anthropic-beta' header must be a comma-separated list of beta names.", 'anthropic-beta', { detail: 'invalid_value' });
      if (!out.includes(v)) out.push(v);
    }
  }
  return out;
}

/** tokens an image or a document block is reserved as (Anthropic's images are at most ~1600 tokens) */
const BLOCK_TOKENS = 1600;
const BLOCK_TEXT = 'x '.repeat(BLOCK_TOKENS);

/**
 * A forwarded conversation as the engines count it (for the reservation at admission, and the estimate when an
 * answer ends without the upstream's usage): each turn's text, thinking, tool inputs and results as text; an
 * image or document as a fixed number of tokens, not its base64 bytes. Forgiving: the upstream validates the body.
 */
export function forwardedCount(body: Record<string, unknown>, model: string): Pick<GenerateRequest, 'model' | 'messages' | 'tools'> {
  const messages: ChatMessage[] = [];
  const textOf = (v: unknown): string => {
    if (typeof v === 'string') return v;
    if (!Array.isArray(v)) return v === undefined || v === null ? '' : JSON.stringify(v);
    let s = '';
    for (const b of v as unknown[]) {
      if (!b || typeof b !== 'object') continue;
      const o = b as Record<string, unknown>;
      let t: string;
      if (o.source !== undefined) t = BLOCK_TEXT;
      else if (typeof o.text === 'string') t = o.text;
      else if (typeof o.thinking === 'string') t = o.thinking;
      else if (o.type === 'tool_use' || o.type === 'server_tool_use') t = `${String(o.name ?? '')} ${JSON.stringify(o.input ?? {})}`;
      else if (o.content !== undefined) t = textOf(o.content);
      else t = '';
      if (t) s = s ? s + '\n' + t : t;
    }
    return s;
  };
  const system = textOf(body.system);
  if (system) messages.push({ role: 'system', content: system });
  for (const m of Array.isArray(body.messages) ? (body.messages as unknown[]) : []) {
    if (!m || typeof m !== 'object') continue;
    const role = (m as { role?: unknown }).role === 'assistant' ? 'assistant' : 'user';
    messages.push({ role, content: textOf((m as { content?: unknown }).content) });
  }
  const tools: FunctionTool[] = [];
  for (const t of Array.isArray(body.tools) ? (body.tools as unknown[]) : []) {
    if (!t || typeof t !== 'object') continue;
    const o = t as Record<string, unknown>;
    tools.push({
      name: typeof o.name === 'string' ? o.name : '',
      description: typeof o.description === 'string' ? o.description : undefined,
      parameters: o.input_schema && typeof o.input_schema === 'object' ? (o.input_schema as Record<string, unknown>) : undefined,
    });
  }
  return { model, messages, tools: tools.length ? tools : undefined };
}
