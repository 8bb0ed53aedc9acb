/**
 * Generates a tiny but real llama-architecture GGUF model for tests: random (seeded) weights, a byte-level BPE
 * ("gpt2") tokenizer trained on a small built-in text, ChatML special tokens and a ChatML jinja chat template.
 * No downloads, no Python. The file is cached under test/.fixtures/ and reused.
 *
 * The weights are random, but shaped so that the output stays readable: one embedding dimension is a positive
 * constant that no layer writes to, so the output matrix can push control tokens and non-printable bytes far down
 * (they are never sampled), and logits have a wide spread (greedy decoding is stable).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/platform/paths.js';
import { encodeGguf, f32, i32Arr, str, strArr, u32, bool, type GgufTensor, type GgufValue } from './gguf-writer.js';

export interface TinyGgufOptions {
  /** PRNG seed (default 1) */
  seed?: number;
  /** embedding width (default 64) */
  nEmbd?: number;
  /** transformer blocks (default 2) */
  nLayer?: number;
  /** attention heads (default 4) */
  nHead?: number;
  /** key/value heads (default nHead) */
  nHeadKv?: number;
  /** feed-forward width (default 2 * nEmbd) */
  nFf?: number;
  /** BPE merges learned from the built-in text (default 200); vocab = 256 bytes + merges + special tokens */
  merges?: number;
  /** context length written in the metadata (default 2048) */
  contextLength?: number;
  /**
   * "reasoning": adds <think>/</think> tokens and a template that opens a thinking section at the start of each
   * answer (like DeepSeek-R1 / Qwen3); </think> gets a higher logit so thinking ends after a few tokens.
   */
  flavour?: 'chat' | 'reasoning';
  /** reasoning flavour: weight that raises the </think> logit (default 3) */
  thinkBoost?: number;
  /** folder for the cached file (default <repo>/test/.fixtures) */
  dir?: string;
}

const GENERATOR_VERSION = 4;

export const CHATML_TEMPLATE =
  '{%- for message in messages -%}' +
  "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}" +
  '{%- endfor -%}' +
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

export const REASONING_TEMPLATE =
  '{%- for message in messages -%}' +
  "{%- if message['role'] == 'assistant' -%}" +
  "{{- '<|im_start|>assistant\\n' -}}" +
  "{%- if message['reasoning_content'] is defined and message['reasoning_content'] -%}" +
  "{{- '<think>' + message['reasoning_content'] + '</think>' -}}" +
  '{%- endif -%}' +
  "{{- message['content'] + '<|im_end|>\\n' -}}" +
  '{%- else -%}' +
  "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
  '{%- endif -%}' +
  '{%- endfor -%}' +
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>' -}}{%- endif -%}";

const CORPUS = `The quick brown fox jumps over the lazy dog. Portico is a small server that answers questions.
Hello, world! How are you today? I am fine, thank you. What is the weather like in the city?
The answer is forty two. Please call the function with the right arguments and return the result.
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}} true false null 0 1 2 3 4 5 6 7 8 9
Once upon a time there was a model that could only say random things, and the tests were happy anyway.
She said that they would be there in the morning, then went to the store to buy some bread and milk.
Numbers like 3.14 and 2048 and 100 appear in text; so do words such as and, the, of, to, in, is, it, that.
`;

// ------------------------------------------------------------------ PRNG

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function gaussian(rand: () => number): () => number {
  return () => {
    const u = Math.max(rand(), 1e-12);
    const v = rand();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  };
}

// ------------------------------------------------------------------ byte-level BPE tokenizer

/** GPT-2's reversible byte -> printable unicode character mapping. */
export function bytesToUnicode(): string[] {
  const bs: number[] = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  const map: string[] = new Array(256);
  bs.forEach((b, i) => (map[b] = String.fromCodePoint(cs[i])));
  return map;
}

const PRETOKENIZE = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

function trainMerges(text: string, count: number, byteMap: string[]): string[] {
  const words = new Map<string, number>();
  for (const m of text.matchAll(PRETOKENIZE)) {
    const w = [...Buffer.from(m[0], 'utf8')].map((b) => byteMap[b]).join('\u0000');
    words.set(w, (words.get(w) ?? 0) + 1);
  }
  let entries = [...words.entries()].map(([w, c]) => ({ syms: w.split('\u0000'), count: c }));
  const merges: string[] = [];
  for (let k = 0; k < count; k++) {
    const pairs = new Map<string, number>();
    for (const { syms, count: c } of entries) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const key = syms[i] + ' ' + syms[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + c);
      }
    }
    let best: string | undefined;
    let bestCount = 1;
    for (const [key, c] of [...pairs.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
      if (c > bestCount) {
        best = key;
        bestCount = c;
      }
    }
    if (!best) break;
    merges.push(best);
    const [a, b] = best.split(' ');
    entries = entries.map(({ syms, count: c }) => {
      const out: string[] = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i]);
      }
      return { syms: out, count: c };
    });
  }
  return merges;
}

// ------------------------------------------------------------------ model

export interface TinyGgufInfo {
  path: string;
  vocabSize: number;
  specialTokens: Record<string, number>;
}

function buildModel(o: Required<Omit<TinyGgufOptions, 'dir'>>): { buffer: Buffer; vocabSize: number; specialTokens: Record<string, number> } {
  const rand = mulberry32(o.seed);
  const gauss = gaussian(rand);
  const byteMap = bytesToUnicode();
  const merges = trainMerges(CORPUS, o.merges, byteMap);

  const tokens: string[] = [];
  const tokenType: number[] = [];
  const allowed: boolean[] = [];
  for (let b = 0; b < 256; b++) {
    tokens.push(byteMap[b]);
    tokenType.push(1); // NORMAL
    allowed.push(b >= 0x20 && b <= 0x7e);
  }
  const seen = new Set(tokens);
  for (const m of merges) {
    const t = m.replace(' ', '');
    if (seen.has(t)) continue;
    seen.add(t);
    tokens.push(t);
    tokenType.push(1);
    allowed.push(true);
  }
  const specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  if (o.flavour === 'reasoning') specials.push('<think>', '</think>');
  const specialTokens: Record<string, number> = {};
  for (const s of specials) {
    specialTokens[s] = tokens.length;
    tokens.push(s);
    const userDefined = s === '<think>' || s === '</think>';
    tokenType.push(userDefined ? 4 : 3); // USER_DEFINED : CONTROL
    allowed.push(s === '</think>');
  }
  // pad the vocabulary to a multiple of 8 with unused tokens
  while (tokens.length % 8 !== 0) {
    tokens.push(`<|unused_${tokens.length}|>`);
    tokenType.push(5); // UNUSED
    allowed.push(false);
  }
  const nVocab = tokens.length;
  const { nEmbd, nLayer, nHead, nHeadKv, nFf } = o;
  const headDim = nEmbd / nHead;
  const nEmbdKv = headDim * nHeadKv;

  const randn = (n: number, std: number) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = gauss() * std;
    return a;
  };
  const ones = (n: number) => new Float32Array(n).fill(1);
  /** weight of shape [inDim, outDim] (ggml order); output rows listed in zeroRows are zero */
  const linear = (inDim: number, outDim: number, std: number, zeroRows: number[] = []) => {
    const w = randn(inDim * outDim, std);
    for (const r of zeroRows) w.fill(0, r * inDim, (r + 1) * inDim);
    return w;
  };

  const CONST = 3;
  const embd = randn(nVocab * nEmbd, 1);
  for (let t = 0; t < nVocab; t++) embd[t * nEmbd] = CONST;
  const out = randn(nVocab * nEmbd, 0.6);
  for (let t = 0; t < nVocab; t++) {
    if (!allowed[t]) {
      out.fill(0, t * nEmbd, (t + 1) * nEmbd);
      out[t * nEmbd] = -10;
    } else out[t * nEmbd] = 0;
  }
  if (o.flavour === 'reasoning') out[specialTokens['</think>'] * nEmbd] = o.thinkBoost;

  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', dims: [nEmbd, nVocab], data: embd },
    { name: 'output_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
    { name: 'output.weight', dims: [nEmbd, nVocab], data: out },
  ];
  const s = 1 / Math.sqrt(nEmbd);
  for (let l = 0; l < nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      { name: p + 'attn_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
      { name: p + 'attn_q.weight', dims: [nEmbd, nEmbd], data: linear(nEmbd, nEmbd, s * 2) },
      { name: p + 'attn_k.weight', dims: [nEmbd, nEmbdKv], data: linear(nEmbd, nEmbdKv, s * 2) },
      { name: p + 'attn_v.weight', dims: [nEmbd, nEmbdKv], data: linear(nEmbd, nEmbdKv, s) },
      // output row 0 stays zero: dimension 0 of the residual stream keeps its constant value
      { name: p + 'attn_output.weight', dims: [nEmbd, nEmbd], data: linear(nEmbd, nEmbd, s, [0]) },
      { name: p + 'ffn_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
      { name: p + 'ffn_gate.weight', dims: [nEmbd, nFf], data: linear(nEmbd, nFf, s) },
      { name: p + 'ffn_up.weight', dims: [nEmbd, nFf], data: linear(nEmbd, nFf, s) },
      { name: p + 'ffn_down.weight', dims: [nFf, nEmbd], data: linear(nFf, nEmbd, 1 / Math.sqrt(nFf), [0]) },
    );
  }

  const template = o.flavour === 'reasoning' ? REASONING_TEMPLATE : CHATML_TEMPLATE;
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', str('llama')],
    ['general.name', str(o.flavour === 'reasoning' ? 'portico-tiny-reasoning' : 'portico-tiny')],
    ['general.file_type', u32(0)], // ALL_F32
    ['general.alignment', u32(32)],
    ['llama.context_length', u32(o.contextLength)],
    ['llama.embedding_length', u32(nEmbd)],
    ['llama.block_count', u32(nLayer)],
    ['llama.feed_forward_length', u32(nFf)],
    ['llama.attention.head_count', u32(nHead)],
    ['llama.attention.head_count_kv', u32(nHeadKv)],
    ['llama.attention.layer_norm_rms_epsilon', f32(1e-5)],
    ['llama.rope.dimension_count', u32(headDim)],
    ['llama.rope.freq_base', f32(10000)],
    ['llama.vocab_size', u32(nVocab)],
    ['tokenizer.ggml.model', str('gpt2')],
    ['tokenizer.ggml.pre', str('gpt-2')],
    ['tokenizer.ggml.tokens', strArr(tokens)],
    ['tokenizer.ggml.token_type', i32Arr(tokenType)],
    ['tokenizer.ggml.merges', strArr(merges)],
    ['tokenizer.ggml.bos_token_id', u32(specialTokens['<|endoftext|>'])],
    ['tokenizer.ggml.eos_token_id', u32(specialTokens['<|im_end|>'])],
    ['tokenizer.ggml.padding_token_id', u32(specialTokens['<|endoftext|>'])],
    ['tokenizer.ggml.add_bos_token', bool(false)],
    ['tokenizer.chat_template', str(template)],
  ];
  return { buffer: encodeGguf(metadata, tensors), vocabSize: nVocab, specialTokens };
}

function resolveOptions(opts: TinyGgufOptions = {}): Required<Omit<TinyGgufOptions, 'dir'>> {
  const nEmbd = opts.nEmbd ?? 64;
  const nHead = opts.nHead ?? 4;
  return {
    seed: opts.seed ?? 1,
    nEmbd,
    nLayer: opts.nLayer ?? 2,
    nHead,
    nHeadKv: opts.nHeadKv ?? nHead,
    nFf: opts.nFf ?? nEmbd * 2,
    merges: opts.merges ?? 200,
    contextLength: opts.contextLength ?? 2048,
    flavour: opts.flavour ?? 'chat',
    thinkBoost: opts.thinkBoost ?? 3,
  };
}

/** Writes (or reuses) the tiny model and returns its path. */
export async function makeTinyGguf(opts: TinyGgufOptions = {}): Promise<string> {
  return (await makeTinyGgufInfo(opts)).path;
}

/** Like makeTinyGguf, with the vocabulary size and special token ids. */
export async function makeTinyGgufInfo(opts: TinyGgufOptions = {}): Promise<TinyGgufInfo> {
  const o = resolveOptions(opts);
  if (o.nEmbd % o.nHead !== 0 || o.nHead % o.nHeadKv !== 0) throw new Error('nEmbd must divide by nHead, nHead by nHeadKv');
  const dir = opts.dir ?? join(packageRoot(), 'test', '.fixtures');
  const hash = createHash('sha256')
    .update(JSON.stringify({ v: GENERATOR_VERSION, ...o }))
    .digest('hex')
    .slice(0, 12);
  const path = join(dir, `tiny-${o.flavour}-${hash}.gguf`);
  const built = buildModel(o); // cheap (tens of ms); also gives the token ids
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
    writeFileSync(tmp, built.buffer);
    renameSync(tmp, path); // atomic: concurrent test processes never see a half-written file
  }
  return { path, vocabSize: built.vocabSize, specialTokens: built.specialTokens };
}
