import type { ChatHistoryItem, ChatModelFunctionCall, ChatModelResponse } from 'node-llama-cpp';
import { EngineError, type ChatMessage } from '../types.js';

export function contentText(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  const parts: string[] = [];
  for (const p of content) {
    if (p.type === 'text') parts.push(p.text);
    else throw new EngineError('This model does not accept image input', 'unsupported_input', 400);
  }
  return parts.join('\n');
}

function parseArgs(text: string): unknown {
  try {
    return JSON.parse(text || '{}');
  } catch {
    return text;
  }
}

function parseResult(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * Maps the normalized conversation to node-llama-cpp's chat history. The last item is always the model response
 * being generated: a new empty one, or (when the conversation ends with tool results) the model response that
 * made the calls, so the model continues its own turn as the chat template expects.
 *
 * system and developer -> system; user -> user; assistant -> model (reasoning as an ended thought segment, text,
 * then its tool calls); tool messages fill in the `result` of the call they answer. A tool message whose call is
 * unknown becomes a user message.
 */
export function toChatHistory(messages: ChatMessage[], extraSystem?: string): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  const pendingCalls = new Map<string, ChatModelFunctionCall>();
  let lastModel: ChatModelResponse | undefined;
  let lastModelHasOpenCalls = false;

  for (const m of messages) {
    switch (m.role) {
      case 'system':
      case 'developer': {
        const text = contentText(m.content);
        const prev = history[history.length - 1];
        if (prev && prev.type === 'system' && typeof prev.text === 'string') prev.text += '\n\n' + text;
        else history.push({ type: 'system', text });
        lastModel = undefined;
        break;
      }
      case 'user':
        history.push({ type: 'user', text: contentText(m.content) });
        lastModel = undefined;
        break;
      case 'assistant': {
        const text = contentText(m.content);
        // an assistant message right after tool results continues the turn that made the calls
        const item: ChatModelResponse = lastModel && lastModelHasOpenCalls ? lastModel : { type: 'model', response: [] };
        if (item !== lastModel) history.push(item);
        if (m.reasoning) item.response.push({ type: 'segment', segmentType: 'thought', text: m.reasoning, ended: true });
        if (text) item.response.push(text);
        lastModelHasOpenCalls = false;
        for (const [i, c] of (m.toolCalls ?? []).entries()) {
          const call: ChatModelFunctionCall = {
            type: 'functionCall',
            name: c.name,
            params: parseArgs(c.arguments),
            result: '',
            startsNewChunk: i === 0,
          };
          item.response.push(call);
          pendingCalls.set(c.callId, call);
          lastModelHasOpenCalls = true;
        }
        lastModel = item;
        break;
      }
      case 'tool': {
        const text = contentText(m.content);
        const call = m.toolCallId ? pendingCalls.get(m.toolCallId) : undefined;
        if (call) {
          call.result = parseResult(text);
          pendingCalls.delete(m.toolCallId as string);
        } else {
          history.push({ type: 'user', text: `Tool result${m.toolCallId ? ` (${m.toolCallId})` : ''}:\n${text}` });
          lastModel = undefined;
        }
        break;
      }
    }
  }

  if (extraSystem) {
    const first = history[0];
    if (first && first.type === 'system' && typeof first.text === 'string') first.text += '\n\n' + extraSystem;
    else history.unshift({ type: 'system', text: extraSystem });
  }

  const last = history[history.length - 1];
  const continuesCalls = last && last.type === 'model' && lastModelHasOpenCalls && last === lastModel;
  if (!continuesCalls) history.push({ type: 'model', response: [] });
  return history;
}
