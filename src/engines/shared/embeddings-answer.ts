/**
 * An embeddings answer of the OpenAI wire, checked: the part of ./embeddings.ts that the worker thread of a large
 * answer (./embeddings-worker.ts) runs too, so it imports nothing.
 */

/** an answer checked (decodeAnswer): its vectors in input order, and what it said of usage and model */
export interface DecodedAnswer {
  vectors: number[][];
  /** usage.prompt_tokens as sent (checked by tokensOf) */
  reported: unknown;
  model?: string;
}

/**
 * The upstream's list, in input order, checked: one vector of numbers per input, all of one length; or why it
 * is unreadable. No I/O.
 */
export function decodeAnswer(text: string, inputs: number): DecodedAnswer | { unreadable: string } {
  let j: { data?: unknown; usage?: { prompt_tokens?: unknown }; model?: unknown };
  try {
    j = JSON.parse(text);
  } catch {
    return { unreadable: 'not JSON' };
  }
  if (!j || typeof j !== 'object' || !Array.isArray(j.data)) return { unreadable: 'no data list' };
  const vectors: number[][] = new Array(inputs);
  const data = j.data as Array<{ index?: unknown; embedding?: unknown }>;
  for (let i = 0; i < data.length; i++) {
    const d = data[i]!;
    const index = typeof d?.index === 'number' ? d.index : i;
    if (!Number.isInteger(index) || index < 0 || index >= inputs || vectors[index]) return { unreadable: `item ${i} has a wrong index` };
    const e = d.embedding;
    let v: number[];
    if (typeof e === 'string') {
      const buf = Buffer.from(e, 'base64');
      if (buf.length % 4 !== 0) return { unreadable: `item ${i} is not float32 base64` };
      v = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
    } else if (Array.isArray(e) && e.every((x) => typeof x === 'number' && Number.isFinite(x))) v = e as number[];
    else return { unreadable: `item ${i} has no vector` };
    vectors[index] = v;
  }
  if (data.length !== inputs || vectors.some((v) => !v)) return { unreadable: `${data.length} vectors for ${inputs} inputs` };
  if (vectors.some((v) => v.length !== vectors[0]!.length || v.length === 0)) return { unreadable: 'vectors of different lengths' };
  return { vectors, reported: j.usage?.prompt_tokens, model: typeof j.model === 'string' ? j.model : undefined };
}
