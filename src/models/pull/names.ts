/**
 * Served names of pulled models (docs/models.md, "Names"): the file's name, lower case, without its extension
 * and split-part suffix, with the quantization moved behind a colon; whisper.cpp files lose their "ggml-" prefix
 * and gain "whisper-":
 *
 *   qwen2.5-0.5b-instruct-q4_k_m.gguf   -> qwen2.5-0.5b-instruct:q4_k_m
 *   Llama-3.2-1B-Instruct-Q4_K_M.gguf   -> llama-3.2-1b-instruct:q4_k_m
 *   ggml-base.en.bin                    -> whisper-base.en
 *   ggml-large-v3-turbo-q5_0.bin        -> whisper-large-v3-turbo:q5_0
 *   en_US-libritts_r-medium.onnx        -> piper-en_us-libritts_r-medium
 *
 * When another file already has that name, the owner is put in front (bartowski/llama-3.2-1b-instruct:q4_k_m).
 */
import { ggufFileQuantNames } from 'node-llama-cpp';
import { PullError } from './errors.js';

const SEP = '[-._]';
const quantPattern = new RegExp(
  `(?:^|${SEP})(${[...ggufFileQuantNames]
    .sort((a, b) => b.length - a.length)
    .map((q) => q.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('|')})(?=$|[-.])`,
  'gi',
);

/** The quantization named in a file name (upper case), if any. */
export function quantInFileName(fileName: string): string | undefined {
  const stem = fileName.replace(/\.(gguf|bin)$/i, '');
  let last: RegExpExecArray | undefined;
  for (const m of stem.matchAll(quantPattern)) last = m as RegExpExecArray;
  return last?.[1]?.toUpperCase();
}

export function isSplitPart(fileName: string): { part: number; parts: number } | undefined {
  const m = /-(\d{5})-of-(\d{5})\.gguf$/i.exec(fileName);
  return m ? { part: Number(m[1]), parts: Number(m[2]) } : undefined;
}

/** The default served name for a model file (the rule above). */
export function defaultModelName(fileName: string, owner?: string): string {
  const base = fileName.split('/').pop()!;
  if (/\.onnx$/i.test(base)) {
    // piper voices: their names carry no quantization (a "-low"/"-medium" is the voice's quality)
    const voice =
      base
        .slice(0, -'.onnx'.length)
        .toLowerCase()
        .replace(/[^a-z0-9._-]+/g, '-')
        .replace(/^[-._]+/, '') || 'voice';
    return owner ? `${owner.toLowerCase()}/piper-${voice}` : `piper-${voice}`;
  }
  let stem = base.replace(/-\d{5}-of-\d{5}(?=\.gguf$)/i, '').replace(/\.(gguf|bin)$/i, '');
  const whisper = /\.bin$/i.test(base) && /^ggml-/i.test(stem);
  if (whisper) stem = stem.slice('ggml-'.length);
  let last: RegExpMatchArray | undefined;
  for (const m of stem.matchAll(quantPattern)) last = m;
  let quant: string | undefined;
  if (last) {
    const rest = (stem.slice(0, last.index!) + stem.slice(last.index! + last[0].length)).replace(/[-._]+$/, '');
    if (rest) {
      stem = rest;
      quant = last[1]?.toLowerCase();
    }
  }
  let name =
    stem
      .toLowerCase()
      .replace(/[^a-z0-9._-]+/g, '-')
      .replace(/^[-._]+/, '') || 'model';
  if (whisper) name = `whisper-${name}`;
  if (quant) name += `:${quant}`;
  return owner ? `${owner.toLowerCase()}/${name}` : name;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$/;

/** A name given with --name: 1-200 characters, letters, digits and . _ : / @ + - (no spaces). */
export function checkModelName(name: string): string {
  if (!NAME.test(name)) {
    throw new PullError('bad_name', `"${name}" is not a usable model name: 1 to 200 characters, starting with a letter or digit, then letters, digits and . _ : / @ + -`);
  }
  return name;
}
