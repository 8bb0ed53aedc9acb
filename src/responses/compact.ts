/**
 * POST /responses/compact: a conversation (a stored chain, new input, or both) made into a compacted input
 * window: the user's messages as they were, then one `compaction` item that stands for everything else. The
 * model writes the summary through the same preparation and engines as /responses (so the same scopes, context
 * window and usage record); Portico seals it (./seal.ts) for the caller. Nothing is stored: the window is not a
 * response and has no id to chain from. See docs/api.md, "Compaction".
 */
import { AppError, ERRORS, type ErrorCode } from '../platform/errors.js';
import type { KeyPrincipal } from '../platform/auth/principal.js';
import type { ModelRegistry } from '../models/registry.js';
import { assertModelScope } from '../api/scopes.js';
import { expandReasoningContent, normalizeInput, type InputPart, type StoredItem } from './input.js';
import { outputText, type ResponseUsage } from './object.js';
import type { Preparer, Prepared } from './prepare.js';
import type { Runner } from './run.js';
import type { Sealer } from './seal.js';
import type { CreateResponseRequest } from './schemas.js';
import { compactionParams, openCompactions } from './compaction.js';
import { newId } from './ids.js';

export interface CompactRequest {
  model: string;
  input?: string | unknown[] | null;
  previous_response_id?: string | null;
  instructions?: string | null;
  prompt_cache_key?: string | null;
}

export type CompactOutputItem =
  { id: string; type: 'message'; role: 'user'; status: 'completed'; content: InputPart[] } | { id: string; type: 'compaction'; encrypted_content: string };

export interface CompactionObject {
  id: string;
  object: 'response.compaction';
  created_at: number;
  output: CompactOutputItem[];
  usage: ResponseUsage;
}

/** what the model is asked to do with the transcript */
export const COMPACT_INSTRUCTIONS = [
  'You compact conversations. The next message is the transcript of a conversation between a user and an assistant.',
  'Write a summary from which the assistant can continue the conversation without the transcript: what the user wants,',
  'what was decided and done, the tools called with their results (keep exact names, numbers, identifiers, file paths',
  "and values), what the assistant answered, and what is still open. The user's own messages are kept word for word",
  'beside your summary, so do not copy them; refer to them. Write plain notes in the language of the conversation.',
  'Do not address anyone, do not add anything that is not in the transcript, and do not answer the user.',
].join(' ');

const DROPPED = '[The earliest part of the conversation did not fit in the model and is left out of this transcript.]';

function partsText(content: InputPart[]): string {
  return content.map((c) => (c.type === 'input_image' ? '[image]' : c.text)).join('');
}

/** one line (or paragraph) of the transcript per item of the conversation, as the model sees it */
function transcriptEntries(items: StoredItem[]): string[] {
  const out: string[] = [];
  for (const it of items) {
    switch (it.type) {
      case 'message': {
        const who = it.role === 'user' ? 'User' : it.role === 'assistant' ? 'Assistant' : it.role === 'developer' ? 'Developer' : 'System';
        out.push(`${who}: ${partsText(it.content)}`);
        break;
      }
      case 'function_call':
        out.push(`Assistant called the tool ${it.name} (call ${it.call_id}) with the arguments ${it.arguments}`);
        break;
      case 'function_call_output':
        out.push(`Tool result for call ${it.call_id}: ${it.output}`);
        break;
      case 'reasoning':
      case 'compaction':
        // the assistant's private reasoning is not summarized; compaction items were opened into messages
        break;
    }
  }
  return out;
}

export interface CompactorDeps {
  models: ModelRegistry;
  preparer: Preparer;
  runner: Runner;
  sealer?: Sealer;
}

export class Compactor {
  constructor(private readonly d: CompactorDeps) {}

  async compact(req: CompactRequest, key: KeyPrincipal, requestId: string, signal: AbortSignal): Promise<CompactionObject> {
    const spec = this.d.models.require(req.model, 'text');
    assertModelScope(key, spec.name);
    const input = req.input === null || req.input === undefined || (Array.isArray(req.input) && req.input.length === 0 && req.previous_response_id) ? undefined : req.input;
    if (input === undefined && !req.previous_response_id) {
      throw new AppError('validation_error', "Provide 'input', 'previous_response_id', or both: there is nothing to compact.", 'input', { detail: 'missing_required_parameter' });
    }
    const sealer = this.d.sealer;
    if (!sealer) throw new AppError('service_unavailable', 'compaction is not available: no sealing secret is configured');

    // a conversation past RESPONSES_MAX_CHAIN_BYTES is compacted from its newest turns that fit (what compaction is for)
    const history = req.previous_response_id ? await this.d.preparer.history(req.previous_response_id, key, { truncation: 'auto' }) : [];
    const inputItems = input === undefined ? [] : expandReasoningContent(input, normalizeInput(input));
    const seen = [
      ...(await openCompactions(history, key.userId, sealer, () => 'previous_response_id')),
      ...(await openCompactions(inputItems, key.userId, sealer, input === undefined ? () => 'input' : compactionParams(input, inputItems))),
    ];
    const kept: CompactOutputItem[] = [];
    for (const it of [...history, ...inputItems]) {
      if (it.type === 'message' && it.role === 'user') kept.push({ id: it.id, type: 'message', role: 'user', status: 'completed', content: it.content });
    }

    const p = await this.fit(req, key, requestId, transcriptEntries(seen));
    const final = await this.d.runner.json(p, signal);
    if (final.status === 'failed') {
      const code = final.error?.code && final.error.code in ERRORS ? (final.error.code as ErrorCode) : 'engine_error';
      throw new AppError(code, `the model failed while writing the summary: ${final.error?.message ?? 'no reason given'}`);
    }
    const summary = outputText(final.output).trim();
    if (!summary) throw new AppError('engine_error', `the model '${spec.name}' wrote an empty summary; try again, or compact with another model`);
    const createdAt = Math.floor(Date.now() / 1000);
    const sealed = await sealer.seal({ summary, model: spec.name, createdAt }, key.userId);
    return {
      id: newId('resp'),
      object: 'response.compaction',
      created_at: createdAt,
      output: [...kept, { id: newId('cmp'), type: 'compaction', encrypted_content: sealed }],
      usage: final.usage!,
    };
  }

  /**
   * The summarizing request, prepared as any response is (model, scope, engine, context window). A transcript
   * longer than the model's window loses its oldest entries until it fits: compacting is what a client does when
   * the conversation has grown too long, so it must not fail for that reason while anything recent fits.
   */
  private async fit(req: CompactRequest, key: KeyPrincipal, requestId: string, entries: string[]): Promise<Prepared> {
    const head = req.instructions ? [`(The assistant's instructions, for context; they are sent again with each request: ${req.instructions})`] : [];
    let from = 0;
    for (;;) {
      const body = [...head, ...(from > 0 ? [DROPPED] : []), ...entries.slice(from)].join('\n\n');
      const synth: CreateResponseRequest = {
        model: req.model,
        instructions: COMPACT_INSTRUCTIONS,
        input: [{ type: 'message', role: 'user', content: body }],
        store: false,
        prompt_cache_key: req.prompt_cache_key ?? null,
      };
      try {
        return await this.d.preparer.prepare(synth, key, requestId);
      } catch (e) {
        if (!(e instanceof AppError) || e.code !== 'context_length_exceeded') throw e;
        const left = entries.length - from;
        if (left <= 1) {
          throw new AppError(
            'context_length_exceeded',
            `The conversation does not fit in the context window of the model '${req.model}' even when only its last item is kept; compact with a model that has a larger window.`,
            'input',
          );
        }
        from += Math.max(1, Math.floor(left / 4));
      }
    }
  }
}
