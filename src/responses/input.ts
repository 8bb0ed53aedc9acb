import { AppError } from '../platform/errors.js';
import type { ChatContentPart, ChatMessage, ChatToolCall } from '../engines/types.js';
import { newId } from './ids.js';

/**
 * Items as Portico stores them (the input_items endpoint lists them, chaining replays them). Each has an id.
 * Content parts keep the Responses names (input_text, input_image, output_text).
 */
export type InputPart =
  | { type: 'input_text'; text: string }
  | { type: 'output_text'; text: string; annotations?: unknown[] }
  | { type: 'input_image'; image_url: string; detail: 'auto' | 'low' | 'high' };

export type StoredItem =
  | { id: string; type: 'message'; role: 'user' | 'assistant' | 'system' | 'developer'; content: InputPart[]; status?: string; name?: string }
  | { id: string; type: 'function_call'; call_id: string; name: string; arguments: string; status?: string }
  | { id: string; type: 'function_call_output'; call_id: string; output: string; status?: string }
  | {
      id: string;
      type: 'reasoning';
      summary: Array<{ type: 'summary_text'; text: string }>;
      content?: Array<{ type: 'reasoning_text'; text: string }>;
      encrypted_content: string | null;
    }
  /** a window made by POST /responses/compact: opened (./seal.ts) before the model sees the conversation */
  | { id: string; type: 'compaction'; encrypted_content: string };

const bad = (message: string, param: string) => new AppError('validation_error', message, param);

function str(v: unknown, param: string, opts: { allowEmpty?: boolean } = {}): string {
  if (typeof v !== 'string') throw bad(`${param} must be a string`, param);
  if (!opts.allowEmpty && v.length === 0) throw bad(`${param} must not be empty`, param);
  return v;
}

function parts(content: unknown, role: string, param: string): InputPart[] {
  if (content === undefined) throw bad(`${param} is required: every input message needs content`, param);
  if (content === null) throw bad(`${param} must not be null`, param);
  if (typeof content === 'string') return [role === 'assistant' ? { type: 'output_text', text: content } : { type: 'input_text', text: content }];
  if (!Array.isArray(content)) throw bad(`${param} must be a string or an array of content parts`, param);
  const spoken = new Set<InputPart>();
  const out = content.map((p, i): InputPart => {
    const pp = `${param}[${i}]`;
    if (!p || typeof p !== 'object') throw bad(`${pp} must be an object`, pp);
    const o = p as Record<string, unknown>;
    switch (o.type) {
      case 'input_text':
      case 'text':
        return { type: 'input_text', text: str(o.text, `${pp}.text`, { allowEmpty: true }) };
      case 'output_text':
        return { type: 'output_text', text: str(o.text, `${pp}.text`, { allowEmpty: true }), annotations: [] };
      case 'refusal':
        return { type: 'output_text', text: str(o.refusal, `${pp}.refusal`, { allowEmpty: true }), annotations: [] };
      case 'output_audio': {
        // a spoken answer sent back is its transcript: the model reads text, not audio
        const part: InputPart = { type: 'output_text', text: str(o.transcript, `${pp}.transcript`, { allowEmpty: true }), annotations: [] };
        spoken.add(part);
        return part;
      }
      case 'input_image': {
        if (o.file_id !== undefined && o.image_url === undefined) throw bad(`${pp}.file_id is not supported: send image_url (an https or data: URL)`, `${pp}.file_id`);
        return { type: 'input_image', image_url: str(o.image_url, `${pp}.image_url`), detail: detail(o.detail, `${pp}.detail`) };
      }
      case 'image_url': {
        const iu = o.image_url;
        if (typeof iu === 'string') return { type: 'input_image', image_url: str(iu, `${pp}.image_url`), detail: 'auto' };
        if (!iu || typeof iu !== 'object') throw bad(`${pp}.image_url is required`, `${pp}.image_url`);
        const u = iu as Record<string, unknown>;
        return { type: 'input_image', image_url: str(u.url, `${pp}.image_url.url`), detail: detail(u.detail, `${pp}.image_url.detail`) };
      }
      default:
        throw bad(`${pp}.type must be one of input_text, input_image, output_text, output_audio (or text, image_url); got ${JSON.stringify(o.type)}`, `${pp}.type`);
    }
  });
  // beside the output_text part of the same answer (the same text), a transcript adds nothing
  return spoken.size && out.some((x) => x.type === 'output_text' && !spoken.has(x)) ? out.filter((x) => !spoken.has(x)) : out;
}

function detail(v: unknown, param: string): 'auto' | 'low' | 'high' {
  if (v === undefined || v === null) return 'auto';
  if (v === 'auto' || v === 'low' || v === 'high') return v;
  throw bad(`${param} must be one of auto, low, high`, param);
}

const ROLES = ['user', 'assistant', 'system', 'developer'] as const;

/** Validates the request's input and gives it as stored items (new ids where the client gave none). */
export function normalizeInput(input: string | unknown[]): StoredItem[] {
  if (typeof input === 'string') return [{ id: newId('msg'), type: 'message', role: 'user', content: [{ type: 'input_text', text: input }] }];
  if (input.length === 0) throw bad('input must not be an empty array', 'input');
  return input.map(normalizeItem);
}

/** items normalized between two turns of the event loop (a few ms) */
export const ITEMS_PER_TURN = 512;

/** whether normalizeInputInTurns takes turns of the event loop for this input */
export const largeInput = (input: string | unknown[]): input is unknown[] => Array.isArray(input) && input.length > ITEMS_PER_TURN;

/**
 * normalizeInput, the same items and the same first error, for an input of thousands of items: ITEMS_PER_TURN
 * at a time with a turn of the event loop between them (4096 items took 7-19 ms in one go).
 */
export async function normalizeInputInTurns(input: unknown[]): Promise<StoredItem[]> {
  const out: StoredItem[] = [];
  for (let from = 0; from < input.length; from += ITEMS_PER_TURN) {
    await new Promise<void>((r) => setImmediate(r));
    for (let i = from; i < Math.min(input.length, from + ITEMS_PER_TURN); i++) out.push(normalizeItem(input[i], i));
  }
  return out;
}

function normalizeItem(raw: unknown, i: number): StoredItem {
  const p = `input[${i}]`;
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw bad(`${p} must be an object`, p);
  const o = raw as Record<string, unknown>;
  const type = o.type ?? (o.role !== undefined ? 'message' : undefined);
  const id = typeof o.id === 'string' && o.id.length > 0 && o.id.length <= 200 ? o.id : undefined;
  switch (type) {
    case 'message': {
      if (o.tool_calls !== undefined)
        throw bad(`${p}.tool_calls is not supported in input messages of the responses endpoint: send function_call items instead`, `${p}.tool_calls`);
      if (o.tool_call_id !== undefined)
        throw bad(`${p}.tool_call_id is not supported in input messages of the responses endpoint: send a function_call_output item instead`, `${p}.tool_call_id`);
      if (o.role === 'tool')
        throw bad(`${p}.role "tool" is not supported in input messages of the responses endpoint: return tool results as function_call_output items`, `${p}.role`);
      if (!ROLES.includes(o.role as any)) throw bad(`${p}.role must be one of ${ROLES.join(', ')}`, `${p}.role`);
      const role = o.role as (typeof ROLES)[number];
      const item: StoredItem = { id: id ?? newId('msg'), type: 'message', role, content: parts(o.content, role, `${p}.content`) };
      if (typeof o.name === 'string' && o.name) item.name = o.name;
      if (o.reasoning_content !== undefined && typeof o.reasoning_content !== 'string') throw bad(`${p}.reasoning_content must be a string`, `${p}.reasoning_content`);
      return item;
    }
    case 'function_call':
      return {
        id: id ?? newId('fc'),
        type: 'function_call',
        call_id: str(o.call_id, `${p}.call_id`),
        name: str(o.name, `${p}.name`),
        arguments: typeof o.arguments === 'string' ? o.arguments : o.arguments === undefined ? '{}' : JSON.stringify(o.arguments),
        status: 'completed',
      };
    case 'function_call_output': {
      const out = o.output;
      let text: string;
      if (typeof out === 'string') text = out;
      else if (Array.isArray(out))
        text = parts(out, 'user', `${p}.output`)
          .map((x) => ('text' in x ? x.text : ''))
          .join('');
      else throw bad(`${p}.output must be a string`, `${p}.output`);
      return { id: id ?? newId('fco'), type: 'function_call_output', call_id: str(o.call_id, `${p}.call_id`), output: text, status: 'completed' };
    }
    case 'reasoning': {
      const summary = Array.isArray(o.summary)
        ? o.summary.filter((s: any) => s && typeof s.text === 'string').map((s: any) => ({ type: 'summary_text' as const, text: s.text }))
        : [];
      const content = Array.isArray(o.content)
        ? o.content.filter((s: any) => s && typeof s.text === 'string').map((s: any) => ({ type: 'reasoning_text' as const, text: s.text }))
        : undefined;
      return { id: id ?? newId('rs'), type: 'reasoning', summary, content, encrypted_content: typeof o.encrypted_content === 'string' ? o.encrypted_content : null };
    }
    case 'compaction': {
      const sealed = str(o.encrypted_content, `${p}.encrypted_content`);
      if (sealed.length > 10 * 1024 * 1024) throw bad(`${p}.encrypted_content is longer than 10485760 characters`, `${p}.encrypted_content`);
      return { id: id ?? newId('cmp'), type: 'compaction', encrypted_content: sealed };
    }
    case 'item_reference':
      throw bad(`${p}: item_reference is not supported; use previous_response_id to continue a stored conversation`, `${p}.type`);
    default:
      throw bad(`${p}.type must be one of message, function_call, function_call_output, reasoning, compaction; got ${JSON.stringify(type)}`, `${p}.type`);
  }
}

/**
 * Where a normalized input item of one type came from in the request's `input`: the k-th item of that type is the
 * k-th element of `input` with that `type` (normalizing maps elements one to one, and the reasoning items
 * expandReasoningContent adds before assistant messages are of no other type). The index, or undefined.
 */
export function rawIndexOf(input: string | unknown[], items: StoredItem[], type: 'compaction' | 'function_call_output'): (i: number) => number | undefined {
  if (typeof input === 'string') return () => undefined;
  // only an error asks, so the request's elements are read then
  return (i) => {
    const k = items.slice(0, i).filter((x) => x.type === type).length;
    let seen = 0;
    for (const [at, x] of input.entries()) if (x && typeof x === 'object' && (x as { type?: unknown }).type === type && seen++ === k) return at;
    return undefined;
  };
}

/**
 * Every function_call_output of the new input answers a function call of the conversation (the history of
 * previous_response_id, stored or in a WebSocket connection's memory, and the input itself, in any order), as
 * OpenAI requires: otherwise a 400 naming the item's call_id. Only the new input is checked, against the whole
 * conversation as given, before any truncation drops old turns. A compaction item stands for calls it replaced,
 * which can no longer be seen (the sealed summary keeps no call ids): an output after one (in the history or
 * earlier in the input) is not checked.
 */
export function checkCallOutputs(history: StoredItem[], items: StoredItem[], paramOf: (i: number) => string): void {
  if (!items.some((it) => it.type === 'function_call_output')) return;
  const calls = new Set<string>();
  for (const it of history) if (it.type === 'function_call') calls.add(it.call_id);
  for (const it of items) if (it.type === 'function_call') calls.add(it.call_id);
  let compacted = history.some((it) => it.type === 'compaction');
  items.forEach((it, i) => {
    if (it.type === 'compaction') compacted = true;
    if (it.type !== 'function_call_output' || compacted || calls.has(it.call_id)) return;
    const param = paramOf(i);
    throw new AppError(
      'validation_error',
      `No tool call found for function call output with call_id '${it.call_id}'. A function_call_output answers a function_call of the conversation: one in 'input', or in the response named by 'previous_response_id' and its chain.`,
      param,
      { detail: 'invalid_value' },
    );
  });
}

/** A reasoning_content field on an assistant input message becomes a reasoning item before it. */
export function expandReasoningContent(input: string | unknown[], items: StoredItem[]): StoredItem[] {
  if (typeof input === 'string') return items;
  const out: StoredItem[] = [];
  items.forEach((it, i) => {
    const rc = (input[i] as Record<string, unknown>)?.reasoning_content;
    if (it.type === 'message' && it.role === 'assistant' && typeof rc === 'string' && rc.length > 0) {
      out.push({ id: newId('rs'), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: rc }], encrypted_content: null });
    }
    out.push(it);
  });
  return out;
}

function chatParts(content: InputPart[]): string | ChatContentPart[] {
  if (content.every((c) => c.type !== 'input_image')) return content.map((c) => (c as { text: string }).text).join('');
  return content.map((c): ChatContentPart => (c.type === 'input_image' ? { type: 'image_url', url: c.image_url, detail: c.detail } : { type: 'text', text: c.text }));
}

/** Turns stored items (history and new input) into the engines' chat messages. */
export function toChatMessages(instructions: string | null | undefined, items: StoredItem[]): ChatMessage[] {
  const msgs: ChatMessage[] = [];
  if (instructions) msgs.push({ role: 'system', content: instructions });
  let pendingReasoning: string | undefined;
  for (const it of items) {
    switch (it.type) {
      case 'message': {
        const m: ChatMessage = { role: it.role, content: chatParts(it.content) };
        if (it.name) m.name = it.name;
        if (it.role === 'assistant' && pendingReasoning) {
          m.reasoning = pendingReasoning;
          pendingReasoning = undefined;
        }
        msgs.push(m);
        break;
      }
      case 'reasoning': {
        const text = [...(it.content ?? []).map((c) => c.text), ...(it.content?.length ? [] : it.summary.map((s) => s.text))].join('\n');
        if (text) pendingReasoning = pendingReasoning ? `${pendingReasoning}\n${text}` : text;
        break;
      }
      case 'function_call': {
        const call: ChatToolCall = { callId: it.call_id, name: it.name, arguments: it.arguments };
        const last = msgs[msgs.length - 1];
        // calls that follow an assistant message (or each other) belong to that assistant turn
        if (last && last.role === 'assistant' && (last.toolCalls || typeof last.content === 'string')) {
          last.toolCalls = [...(last.toolCalls ?? []), call];
        } else {
          msgs.push({ role: 'assistant', content: '', toolCalls: [call], ...(pendingReasoning ? { reasoning: pendingReasoning } : {}) });
          pendingReasoning = undefined;
        }
        break;
      }
      case 'function_call_output':
        msgs.push({ role: 'tool', content: it.output, toolCallId: it.call_id });
        break;
    }
  }
  return msgs;
}
