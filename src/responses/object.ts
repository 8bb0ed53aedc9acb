import type { CreateResponseRequest } from './schemas.js';
import type { StoredItem } from './input.js';

/**
 * The statuses of the specification (section 3.2). A background response waiting for a worker is `in_progress`
 * too: whether a worker has taken it is the row's job state (ResponseStore, `StoredResponse.job`), not a status.
 */
export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export type OutputTextPart = { type: 'output_text'; text: string; annotations: unknown[]; logprobs: unknown[] };
/** the spoken answer (modalities audio): base64 audio of the message's text, and that text (SDK ResponseOutputAudio) */
export type OutputAudioPart = { type: 'output_audio'; data: string; transcript: string };

export type OutputItem =
  | {
      id: string;
      type: 'message';
      status: 'in_progress' | 'completed' | 'incomplete';
      role: 'assistant';
      /** the output_text part first; with modalities audio, the output_audio part after it */
      content: Array<OutputTextPart | OutputAudioPart>;
    }
  | { id: string; type: 'function_call'; status: 'in_progress' | 'completed' | 'incomplete'; call_id: string; name: string; arguments: string }
  | {
      id: string;
      type: 'reasoning';
      status?: 'in_progress' | 'completed' | 'incomplete';
      summary: Array<{ type: 'summary_text'; text: string }>;
      content: Array<{ type: 'reasoning_text'; text: string }>;
      encrypted_content: string | null;
    };

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** The ResponseObject of spec 2.5, every field present (nullable ones as null). */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  background: boolean;
  billing: { payer: string };
  completed_at: number | null;
  error: { code: string; type: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  prompt_cache_key: string | null;
  prompt_cache_retention: string | null;
  reasoning: { effort: string | null; summary: string | null };
  safety_identifier: string | null;
  service_tier: string;
  store: boolean;
  temperature: number;
  text: { format: Record<string, unknown>; verbosity: string };
  tool_choice: unknown;
  tools: Array<Record<string, unknown>>;
  top_logprobs: number;
  top_p: number;
  truncation: 'auto' | 'disabled';
  user: string | null;
  metadata: Record<string, string>;
  usage: ResponseUsage | null;
  presence_penalty: number;
  frequency_penalty: number;
  /** Portico: the answer's text, as the SDKs compute output_text (not part of the stored object) */
  output_text?: string;
}

export function normalizedTools(req: CreateResponseRequest): Array<Record<string, unknown>> {
  return (req.tools ?? []).map((t) => {
    const f = (t.function ?? {}) as Record<string, unknown>;
    return {
      type: 'function',
      name: (t.name ?? f.name) as string,
      description: (t.description ?? f.description ?? null) as string | null,
      parameters: (t.parameters ?? f.parameters ?? null) as Record<string, unknown> | null,
      strict: (t.strict ?? f.strict ?? null) as boolean | null,
    };
  });
}

export function toolChoiceOf(req: CreateResponseRequest): unknown {
  const tc = req.tool_choice;
  if (tc === undefined) return 'auto';
  if (typeof tc === 'string') return tc;
  const name = tc.name ?? (tc.function as { name?: string } | undefined)?.name;
  return { type: 'function', name };
}

/** The object as it stands when a request is accepted. */
export function initialResponse(req: CreateResponseRequest, id: string, createdAt: number, status: ResponseStatus): ResponseObject {
  const format = req.text?.format ?? { type: 'text' };
  return {
    id,
    object: 'response',
    created_at: createdAt,
    status,
    background: req.background ?? false,
    billing: { payer: 'developer' },
    completed_at: null,
    error: null,
    incomplete_details: null,
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    max_tool_calls: req.max_tool_calls ?? null,
    model: req.model,
    output: [],
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    previous_response_id: req.previous_response_id ?? null,
    prompt_cache_key: req.prompt_cache_key ?? null,
    prompt_cache_retention: req.prompt_cache_retention ?? null,
    reasoning: { effort: req.reasoning?.effort ?? null, summary: req.reasoning?.summary ?? req.reasoning?.generate_summary ?? null },
    safety_identifier: req.safety_identifier ?? null,
    service_tier: req.service_tier && req.service_tier !== 'auto' ? req.service_tier : 'default',
    store: req.store ?? true,
    temperature: req.temperature ?? 1,
    text: { format: format as Record<string, unknown>, verbosity: req.text?.verbosity ?? 'medium' },
    tool_choice: toolChoiceOf(req),
    tools: normalizedTools(req),
    top_logprobs: req.top_logprobs ?? 0,
    top_p: req.top_p ?? 1,
    truncation: req.truncation ?? 'disabled',
    user: req.user ?? null,
    metadata: req.metadata ?? {},
    usage: null,
    presence_penalty: req.presence_penalty ?? 0,
    frequency_penalty: req.frequency_penalty ?? 0,
  };
}

/** Output items as history for a later request (chaining). */
export function outputAsItems(output: OutputItem[]): StoredItem[] {
  const items: StoredItem[] = [];
  for (const o of output) {
    // a spoken part is not history: its transcript is the text part the model sees (the audio is not sent back)
    if (o.type === 'message')
      items.push({
        id: o.id,
        type: 'message',
        role: 'assistant',
        content: o.content.flatMap((c) => (c.type === 'output_text' ? [{ type: 'output_text' as const, text: c.text }] : [])),
      });
    else if (o.type === 'function_call') items.push({ id: o.id, type: 'function_call', call_id: o.call_id, name: o.name, arguments: o.arguments, status: o.status });
    else items.push({ id: o.id, type: 'reasoning', summary: o.summary, content: o.content, encrypted_content: o.encrypted_content });
  }
  return items;
}

export function outputText(output: OutputItem[]): string {
  let s = '';
  for (const o of output) if (o.type === 'message') for (const c of o.content) if (c.type === 'output_text') s += c.text;
  return s;
}

/** Characters the voice was given (the transcripts of the spoken parts), as /audio/speech counts its input. */
export function spokenCharacters(output: OutputItem[]): number {
  let n = 0;
  for (const o of output) if (o.type === 'message') for (const c of o.content) if (c.type === 'output_audio') n += [...c.transcript].length;
  return n;
}
