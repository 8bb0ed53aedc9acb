/**
 * The messages of a Chat Completions request: which fields each role may have (checked for every engine, as
 * OpenAI checks them), the conversation rules Portico applies when it generates itself (a tool message answers
 * a call of the assistant message before it; every call is answered), and the conversion to the engines'
 * normalized ChatMessage.
 */
import { AppError, type ErrorCode } from '../platform/errors.js';
import type { ChatContentPart, ChatMessage } from '../engines/types.js';
import type { ChatMessageParam, ContentPartParam } from './schemas.js';

const bad = (message: string, param: string, code: ErrorCode = 'validation_error', detail?: 'invalid_value' | 'missing_required_parameter' | 'unknown_parameter') =>
  new AppError(code, message, param, detail ? { detail } : {});

/** the content parts each role may have (OpenAI's message types) */
const PARTS: Record<string, readonly string[]> = {
  system: ['text'],
  developer: ['text'],
  user: ['text', 'image_url', 'input_audio', 'file'],
  assistant: ['text', 'refusal'],
  tool: ['text'],
  function: [],
};

/** the fields each role may have besides role and content */
const FIELDS: Record<string, readonly string[]> = {
  system: ['name'],
  developer: ['name'],
  user: ['name'],
  assistant: ['name', 'tool_calls', 'refusal', 'audio', 'function_call', 'reasoning_content', 'annotations', 'parsed'],
  tool: ['tool_call_id'],
  function: ['name'],
};

/** Checks each message against the rules of its role; throws a 400 naming the message and the field. */
export function checkMessages(messages: readonly ChatMessageParam[]): void {
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    for (const k of Object.keys(m)) {
      if (k === 'role' || k === 'content') continue;
      if ((m as Record<string, unknown>)[k] === undefined) continue;
      if (!FIELDS[m.role]!.includes(k))
        throw bad(`Invalid parameter: '${k}' is not allowed on messages with role '${m.role}'.`, `${at}.${k}`, 'validation_error', 'unknown_parameter');
    }
    const c = m.content;
    if (m.role === 'assistant') {
      if ((c === undefined || c === null) && !m.tool_calls?.length && !m.function_call && !m.refusal && !m.audio) {
        throw bad(`${at}: an assistant message needs 'content' or 'tool_calls'.`, `${at}.content`, 'validation_error', 'missing_required_parameter');
      }
    } else if (c === undefined || c === null) {
      throw bad(`Missing required parameter: '${at}.content'.`, `${at}.content`, 'validation_error', 'missing_required_parameter');
    }
    if (Array.isArray(c)) {
      if (c.length === 0 && m.role !== 'assistant')
        throw bad(`Invalid '${at}.content': empty array. Expected an array with at least 1 part.`, `${at}.content`, 'validation_error', 'invalid_value');
      c.forEach((p, j) => checkPart(p, m.role, `${at}.content[${j}]`));
    }
    if (m.role === 'tool' && !m.tool_call_id) {
      throw bad(`Missing required parameter: '${at}.tool_call_id'.`, `${at}.tool_call_id`, 'validation_error', 'missing_required_parameter');
    }
    if (m.role === 'function' && !m.name) throw bad(`Missing required parameter: '${at}.name'.`, `${at}.name`, 'validation_error', 'missing_required_parameter');
    m.tool_calls?.forEach((t, j) => {
      const tp = `${at}.tool_calls[${j}]`;
      if (t.type === 'function' && !t.function) throw bad(`Missing required parameter: '${tp}.function'.`, `${tp}.function`, 'validation_error', 'missing_required_parameter');
      if (t.type === 'custom' && !t.custom) throw bad(`Missing required parameter: '${tp}.custom'.`, `${tp}.custom`, 'validation_error', 'missing_required_parameter');
      if (t.type === 'function' && t.custom) throw bad(`Invalid parameter: a function tool call has no 'custom'.`, `${tp}.custom`, 'validation_error', 'unknown_parameter');
      if (t.type === 'custom' && t.function) throw bad(`Invalid parameter: a custom tool call has no 'function'.`, `${tp}.function`, 'validation_error', 'unknown_parameter');
    });
  });
}

function checkPart(p: ContentPartParam, role: string, at: string): void {
  const allowed = PARTS[role]!;
  if (!allowed.includes(p.type)) {
    throw bad(
      `Invalid value for '${at}.type': '${p.type}'. Messages with role '${role}' take ${allowed.length ? allowed.map((t) => `'${t}'`).join(', ') : 'no'} content parts.`,
      `${at}.type`,
      'validation_error',
      'invalid_value',
    );
  }
  const field = p.type === 'text' ? 'text' : p.type;
  if ((p as Record<string, unknown>)[field] === undefined)
    throw bad(`Missing required parameter: '${at}.${field}'.`, `${at}.${field}`, 'validation_error', 'missing_required_parameter');
  for (const k of ['text', 'image_url', 'input_audio', 'file', 'refusal'] as const) {
    if (k !== field && p[k] !== undefined) throw bad(`Invalid parameter: a '${p.type}' part has no '${k}'.`, `${at}.${k}`, 'validation_error', 'unknown_parameter');
  }
}

/**
 * The conversation rules of OpenAI's API, applied when Portico generates itself (an upstream applies its own):
 * a `tool` message answers a call made by the assistant message before it, and every call gets its answer
 * before the conversation goes on.
 */
export function checkToolTurns(messages: readonly ChatMessageParam[]): void {
  let open: Set<string> | undefined;
  let openAt = -1;
  messages.forEach((m, i) => {
    if (m.role === 'tool') {
      if (!open || !open.has(m.tool_call_id!)) {
        throw bad(
          `Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (messages[${i}].tool_call_id '${m.tool_call_id}' answers no call).`,
          `messages[${i}].tool_call_id`,
          'validation_error',
          'invalid_value',
        );
      }
      open.delete(m.tool_call_id!);
      return;
    }
    if (open && open.size > 0) {
      throw bad(
        `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...open].join(', ')}.`,
        `messages[${openAt}].tool_calls`,
        'validation_error',
        'invalid_value',
      );
    }
    open = undefined;
    if (m.role === 'assistant' && m.tool_calls?.length) {
      open = new Set(m.tool_calls.map((t) => t.id));
      openAt = i;
    }
  });
  if (open && open.size > 0) {
    throw bad(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...open].join(', ')}.`,
      `messages[${openAt}].tool_calls`,
      'validation_error',
      'invalid_value',
    );
  }
}

/**
 * The engines' normalized messages. `strict` (Portico generates): what an embedded engine cannot take is
 * refused with a 400 naming it (audio and file parts, custom tool calls, the deprecated function role);
 * otherwise (counting tokens for an estimate) such parts are left out.
 */
export function toChatMessages(messages: readonly ChatMessageParam[], strict: boolean): ChatMessage[] {
  return messages.map((m, i) => {
    const at = `messages[${i}]`;
    if (m.role === 'function') {
      if (strict)
        throw bad(`${at}: the 'function' role is deprecated and not supported by this model; send tool calls and 'tool' messages.`, `${at}.role`, 'unsupported_parameter');
      return { role: 'tool', content: typeof m.content === 'string' ? m.content : '', toolCallId: m.name };
    }
    const out: ChatMessage = { role: m.role, content: content(m.content, at, strict) };
    if (m.name) out.name = m.name;
    if (m.role === 'tool') out.toolCallId = m.tool_call_id;
    if (m.role === 'assistant') {
      if (m.reasoning_content) out.reasoning = m.reasoning_content;
      if (m.refusal && (out.content === '' || (Array.isArray(out.content) && out.content.length === 0))) out.content = m.refusal;
      const calls = (m.tool_calls ?? []).flatMap((t, j) => {
        if (t.type === 'function') return [{ callId: t.id, name: t.function!.name, arguments: t.function!.arguments }];
        if (strict) throw bad(`${at}.tool_calls[${j}]: custom tool calls are not supported by this model.`, `${at}.tool_calls[${j}].type`, 'unsupported_parameter');
        return [];
      });
      if (m.function_call) {
        if (strict) throw bad(`${at}.function_call is deprecated and not supported by this model; send 'tool_calls'.`, `${at}.function_call`, 'unsupported_parameter');
      }
      if (calls.length) out.toolCalls = calls;
    }
    return out;
  });
}

function content(c: ChatMessageParam['content'], at: string, strict: boolean): string | ChatContentPart[] {
  if (c === undefined || c === null) return '';
  if (typeof c === 'string') return c;
  const parts: ChatContentPart[] = [];
  c.forEach((p, j) => {
    if (p.type === 'text') parts.push({ type: 'text', text: p.text! });
    else if (p.type === 'refusal') parts.push({ type: 'text', text: p.refusal! });
    else if (p.type === 'image_url') parts.push({ type: 'image_url', url: p.image_url!.url, ...(p.image_url!.detail ? { detail: p.image_url!.detail } : {}) });
    else if (strict) {
      throw bad(
        `${at}.content[${j}]: '${p.type}' parts are not supported by this model (it takes text${p.type === 'file' ? '' : ' and images where it can see'}).`,
        `${at}.content[${j}].type`,
        'unsupported_parameter',
      );
    }
  });
  // all text: one string, as most templates expect
  if (parts.every((p) => p.type === 'text')) return parts.map((p) => (p as { text: string }).text).join('\n');
  return parts;
}
