import type { ChatMessage, FunctionTool } from '../types.js';

/**
 * Token estimates for upstreams: no OpenAI-compatible server has a standard token-counting endpoint, so this
 * is a deliberate over-estimate rather than an exact count (it is used for context-window checks and truncation,
 * where counting too high is the safe side):
 * - ASCII: 1 token per 4 characters (English BPE averages ~4.0-4.5); any non-ASCII UTF-16 unit: 1 token
 *   (CJK is ~1 token per character, accented Latin less, so this over-counts those);
 * - 4 tokens per message for role and separators (OpenAI's documented per-message overhead is 3-4), 3 to
 *   prime the answer;
 * - images: 765 tokens (a 1024x1024 image at high detail is 765 with OpenAI; 85 at low detail);
 * - tools: their JSON definition as text plus 8 tokens each.
 */
export function estimateTextTokens(s: string): number {
  let ascii = 0;
  let other = 0;
  for (let i = 0; i < s.length; i++) {
    if (s.charCodeAt(i) < 128) ascii++;
    else other++;
  }
  return Math.ceil(ascii / 4) + other;
}

export function estimateTokens(messages: readonly ChatMessage[], tools?: readonly FunctionTool[]): number {
  let n = 3;
  for (const m of messages) {
    n += 4;
    if (typeof m.content === 'string') n += estimateTextTokens(m.content);
    else for (const p of m.content) n += p.type === 'text' ? estimateTextTokens(p.text) : p.detail === 'low' ? 85 : 765;
    if (m.name) n += 1 + estimateTextTokens(m.name);
    if (m.reasoning) n += estimateTextTokens(m.reasoning);
    if (m.toolCalls) for (const c of m.toolCalls) n += 4 + estimateTextTokens(c.name) + estimateTextTokens(c.arguments);
  }
  if (tools?.length) {
    for (const t of tools) n += 8 + estimateTextTokens(JSON.stringify(t));
  }
  return n;
}
