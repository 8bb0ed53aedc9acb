/**
 * Generates a tiny but real BERT-architecture GGUF embedding model for tests: an encoder (bidirectional attention,
 * no causal mask), mean pooling, a WordPiece ("bert") vocabulary of the words of a small built-in text, random
 * (seeded) weights. llama.cpp loads it as it loads a converted sentence-transformers model (all-MiniLM, bge,
 * nomic...). No downloads, no Python; cached under test/.fixtures/ and reused.
 *
 * The weights are random, so the vectors mean nothing; what tests can rely on: one vector per input of
 * `nEmbd` numbers, the same text gives the same vector, different texts give different vectors, and the token
 * count of a text is its words (and punctuation marks) plus [CLS] and [SEP].
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/platform/paths.js';
import { encodeGguf, f32, i32Arr, str, strArr, u32, bool, type GgufTensor, type GgufValue } from './gguf-writer.js';

export interface TinyEmbeddingGgufOptions {
  seed?: number;
  /** vector size (default 32) */
  nEmbd?: number;
  nLayer?: number;
  nHead?: number;
  /** positions the model has (default 128): longer inputs are refused */
  contextLength?: number;
  /** 1 mean (default), 2 CLS */
  pooling?: 1 | 2;
  dir?: string;
}

const GENERATOR_VERSION = 1;

const WORDS = `the quick brown fox jumps over lazy dog portico is a small server that answers questions hello world how are you
today i am fine thank what weather like in city answer forty two please call function with right arguments and return result
once upon time there was model could only say random things tests were happy anyway she said they would be morning then went
to store buy some bread milk numbers appear text so do words such as of it cat cats sat on mat`;

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

function build(o: Required<Omit<TinyEmbeddingGgufOptions, 'dir'>>): Buffer {
  const rand = mulberry32(o.seed);
  const gauss = () => Math.sqrt(-2 * Math.log(Math.max(rand(), 1e-12))) * Math.cos(2 * Math.PI * rand());
  // WordPiece vocabulary as llama.cpp's converter writes it: whole words with a leading U+2581, continuation
  // pieces (## in the Hugging Face vocabulary) bare; single letters and digits both ways so any word tokenizes
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  const tokens: string[] = [...specials];
  const types: number[] = [3, 2, 3, 3, 3]; // CONTROL, UNKNOWN
  const seen = new Set(tokens);
  const add = (t: string) => {
    if (seen.has(t)) return;
    seen.add(t);
    tokens.push(t);
    types.push(1);
  };
  for (const w of WORDS.split(/\s+/).filter(Boolean)) add('\u2581' + w);
  for (const c of 'abcdefghijklmnopqrstuvwxyz0123456789') {
    add('\u2581' + c);
    add(c);
  }
  for (const p of '.,!?;:\'"()-') add('\u2581' + p);
  while (tokens.length % 8 !== 0) {
    tokens.push(`[unused${tokens.length}]`);
    types.push(5);
  }
  const nVocab = tokens.length;
  const { nEmbd, nLayer, nHead, contextLength } = o;
  const nFf = nEmbd * 2;
  const randn = (n: number, std: number) => Float32Array.from({ length: n }, () => gauss() * std);
  const ones = (n: number) => new Float32Array(n).fill(1);
  const zeros = (n: number) => new Float32Array(n);
  const s = 1 / Math.sqrt(nEmbd);
  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', dims: [nEmbd, nVocab], data: randn(nEmbd * nVocab, 1) },
    { name: 'token_types.weight', dims: [nEmbd, 2], data: randn(nEmbd * 2, 0.02) },
    { name: 'position_embd.weight', dims: [nEmbd, contextLength], data: randn(nEmbd * contextLength, 0.1) },
    { name: 'token_embd_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
    { name: 'token_embd_norm.bias', dims: [nEmbd], data: zeros(nEmbd) },
  ];
  for (let l = 0; l < nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      { name: p + 'attn_q.weight', dims: [nEmbd, nEmbd], data: randn(nEmbd * nEmbd, s) },
      { name: p + 'attn_q.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'attn_k.weight', dims: [nEmbd, nEmbd], data: randn(nEmbd * nEmbd, s) },
      { name: p + 'attn_k.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'attn_v.weight', dims: [nEmbd, nEmbd], data: randn(nEmbd * nEmbd, s) },
      { name: p + 'attn_v.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'attn_output.weight', dims: [nEmbd, nEmbd], data: randn(nEmbd * nEmbd, s) },
      { name: p + 'attn_output.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'attn_output_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
      { name: p + 'attn_output_norm.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'ffn_up.weight', dims: [nEmbd, nFf], data: randn(nEmbd * nFf, s) },
      { name: p + 'ffn_up.bias', dims: [nFf], data: zeros(nFf) },
      { name: p + 'ffn_down.weight', dims: [nFf, nEmbd], data: randn(nFf * nEmbd, 1 / Math.sqrt(nFf)) },
      { name: p + 'ffn_down.bias', dims: [nEmbd], data: zeros(nEmbd) },
      { name: p + 'layer_output_norm.weight', dims: [nEmbd], data: ones(nEmbd) },
      { name: p + 'layer_output_norm.bias', dims: [nEmbd], data: zeros(nEmbd) },
    );
  }
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', str('bert')],
    ['general.name', str('portico-tiny-embedding')],
    ['general.file_type', u32(0)],
    ['general.alignment', u32(32)],
    ['bert.context_length', u32(contextLength)],
    ['bert.embedding_length', u32(nEmbd)],
    ['bert.feed_forward_length', u32(nFf)],
    ['bert.block_count', u32(nLayer)],
    ['bert.attention.head_count', u32(nHead)],
    ['bert.attention.layer_norm_epsilon', f32(1e-12)],
    ['bert.attention.causal', bool(false)],
    ['bert.pooling_type', u32(o.pooling)],
    ['tokenizer.ggml.model', str('bert')],
    ['tokenizer.ggml.tokens', strArr(tokens)],
    ['tokenizer.ggml.token_type', i32Arr(types)],
    ['tokenizer.ggml.token_type_count', u32(2)],
    ['tokenizer.ggml.padding_token_id', u32(0)],
    ['tokenizer.ggml.unknown_token_id', u32(1)],
    ['tokenizer.ggml.cls_token_id', u32(2)],
    ['tokenizer.ggml.seperator_token_id', u32(3)],
    ['tokenizer.ggml.mask_token_id', u32(4)],
    ['tokenizer.ggml.bos_token_id', u32(2)],
    ['tokenizer.ggml.eos_token_id', u32(3)],
  ];
  return encodeGguf(metadata, tensors);
}

/** Writes (or reuses) the tiny embedding model and returns its path. */
export async function makeTinyEmbeddingGguf(opts: TinyEmbeddingGgufOptions = {}): Promise<string> {
  const o = {
    seed: opts.seed ?? 1,
    nEmbd: opts.nEmbd ?? 32,
    nLayer: opts.nLayer ?? 2,
    nHead: opts.nHead ?? 4,
    contextLength: opts.contextLength ?? 128,
    pooling: opts.pooling ?? 1,
  };
  const dir = opts.dir ?? join(packageRoot(), 'test', '.fixtures');
  const hash = createHash('sha256')
    .update(JSON.stringify({ v: GENERATOR_VERSION, ...o }))
    .digest('hex')
    .slice(0, 12);
  const path = join(dir, `tiny-bert-${hash}.gguf`);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
    writeFileSync(tmp, build(o));
    renameSync(tmp, path);
  }
  return path;
}
