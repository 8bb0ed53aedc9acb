/**
 * Compaction items as input: a `compaction` item (made by POST /responses/compact, sealed by ./seal.ts) is opened
 * and given to the model as what it stands for, the summary of the conversation it replaced. An item that does
 * not open (altered, another user's, another server's) is a 400 `invalid_encrypted_content`, OpenAI's code for
 * encrypted content it cannot verify.
 */
import { AppError } from '../platform/errors.js';
import { rawIndexOf, type StoredItem } from './input.js';
import type { Sealer } from './seal.js';

/** how an opened summary starts, so the model knows what it is reading */
export const SUMMARY_HEADING = '[Summary of the earlier part of this conversation, which was compacted]';

export function invalidCompaction(id: string, param: string | null): AppError {
  return new AppError(
    'invalid_encrypted_content',
    `The encrypted content for item ${id} could not be verified: it was altered, belongs to another user, or was made by another server.`,
    param,
  );
}

/**
 * The items as the model sees them: each compaction item replaced by an assistant message with its summary
 * (the model's own earlier words). `paramOf(i)` names the parameter an item came from, for the error.
 */
export async function openCompactions(items: StoredItem[], owner: string, sealer: Sealer | undefined, paramOf: (i: number) => string | null): Promise<StoredItem[]> {
  if (!items.some((it) => it.type === 'compaction')) return items;
  const out: StoredItem[] = [];
  for (const [i, it] of items.entries()) {
    if (it.type !== 'compaction') {
      out.push(it);
      continue;
    }
    const c = sealer ? await sealer.open(it.encrypted_content, owner) : undefined;
    if (!c) throw invalidCompaction(it.id, paramOf(i));
    out.push({ id: it.id, type: 'message', role: 'assistant', content: [{ type: 'output_text', text: `${SUMMARY_HEADING}\n${c.summary}` }] });
  }
  return out;
}

/** Where a compaction item of the normalized input came from, for error messages (`input[3].encrypted_content`). */
export function compactionParams(input: string | unknown[], items: StoredItem[]): (i: number) => string | null {
  const at = rawIndexOf(input, items, 'compaction');
  return (i) => {
    const k = at(i);
    return k === undefined ? 'input' : `input[${k}].encrypted_content`;
  };
}
