/**
 * A ggml whisper model file with RANDOM weights of the real architecture, in the format whisper.cpp's loader reads
 * (whisper_model_load in whisper.cpp/src/whisper.cpp): magic 0x67676d6c, 11 int32 hyper-parameters, the mel filter
 * bank, the vocabulary, then every tensor (n_dims, name length, type, dims, name, data) the loader expects, with the
 * names and shapes it checks. The real binding loads it and runs the full encoder/decoder on it: what it says is
 * noise, but everything around the recognizer (pull, load, decode, segments, words, translation, streaming
 * callbacks, timing) is the real code path. Compute time does not depend on the weight values, so the same file at
 * a real model's dimensions (WHISPER_DIMS['base.en']) measures the real-time factor of that size.
 *
 * The decoder emits at most n_text_ctx/2 - 4 tokens per 30-s window (whisper.cpp's bound); random weights rarely
 * choose end-of-text, so the tiny test dimensions keep n_text_ctx small: a transcription stays well under a second.
 */
import { closeSync, openSync, writeSync } from 'node:fs';

export interface WhisperDims {
  n_vocab: number;
  n_audio_ctx: number;
  n_audio_state: number;
  n_audio_head: number;
  n_audio_layer: number;
  n_text_ctx: number;
  n_text_state: number;
  n_text_head: number;
  n_text_layer: number;
  n_mels: number;
}

/** english-only vocabulary (the .en models): 51864 ids; multilingual: 51865 (99 languages); large-v3: 51866 */
export const N_VOCAB_EN = 51864;
export const N_VOCAB_MULTILINGUAL = 51865;

export const WHISPER_DIMS = {
  /** the smallest that loads and decodes: one layer each, state 64, a 64-token text context (<= 28 tokens) */
  'test.en': {
    n_vocab: N_VOCAB_EN,
    n_audio_ctx: 1500,
    n_audio_state: 64,
    n_audio_head: 2,
    n_audio_layer: 1,
    n_text_ctx: 64,
    n_text_state: 64,
    n_text_head: 2,
    n_text_layer: 1,
    n_mels: 80,
  },
  test: {
    n_vocab: N_VOCAB_MULTILINGUAL,
    n_audio_ctx: 1500,
    n_audio_state: 64,
    n_audio_head: 2,
    n_audio_layer: 1,
    n_text_ctx: 64,
    n_text_state: 64,
    n_text_head: 2,
    n_text_layer: 1,
    n_mels: 80,
  },
  /** the published base.en dimensions (74 M parameters; ggml-base.en.bin is 148 MB in f16) */
  'base.en': {
    n_vocab: N_VOCAB_EN,
    n_audio_ctx: 1500,
    n_audio_state: 512,
    n_audio_head: 8,
    n_audio_layer: 6,
    n_text_ctx: 448,
    n_text_state: 512,
    n_text_head: 8,
    n_text_layer: 6,
    n_mels: 80,
  },
  /** the published tiny.en dimensions (39 M parameters) */
  'tiny.en': {
    n_vocab: N_VOCAB_EN,
    n_audio_ctx: 1500,
    n_audio_state: 384,
    n_audio_head: 6,
    n_audio_layer: 4,
    n_text_ctx: 448,
    n_text_state: 384,
    n_text_head: 6,
    n_text_layer: 4,
    n_mels: 80,
  },
} satisfies Record<string, WhisperDims>;

// the words the vocabulary is made of: what a random decoder says is made of these (ascii, so every token is valid UTF-8)
const WORDS =
  'the birch canoe slid on smooth planks glue sheet to dark blue background it is easy tell depth of well these days a chicken leg rare dish rice often served in round bowls juice lemons makes fine punch box was thrown beside parked truck'.split(
    ' ',
  );

/** float32 -> IEEE half bits (round to nearest; the small random values here never overflow) */
const scratch = new Float32Array(1);
const scratchBits = new Uint32Array(scratch.buffer);
function f16(v: number): number {
  scratch[0] = v;
  const x = scratchBits[0]!;
  const sign = (x >>> 16) & 0x8000;
  let exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant = (mant | 0x800000) >>> (1 - exp);
    return sign | ((mant + 0x1000) >>> 13);
  }
  if (exp >= 31) return sign | 0x7c00;
  mant += 0x1000;
  if (mant & 0x800000) {
    mant = 0;
    exp++;
  }
  return sign | (exp << 10) | (mant >>> 13);
}

/**
 * Writes the model to `path`; f16 (ftype 1, as the published ggml files) or f32. Deterministic for a seed.
 * Returns the file's size in bytes.
 */
export function writeWhisperGgml(path: string, dims: WhisperDims, opts: { f16?: boolean; seed?: number } = {}): number {
  const useF16 = opts.f16 ?? true;
  let seed = opts.seed ?? 1;
  // xorshift32: fast, deterministic; uniform in [-1, 1)
  const rand = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x80000000 - 1;
  };
  const fd = openSync(path, 'w');
  let size = 0;
  const chunks: Buffer[] = [];
  let pending = 0;
  const flush = () => {
    for (const c of chunks) size += writeSync(fd, c);
    chunks.length = 0;
    pending = 0;
  };
  const put = (b: Buffer) => {
    chunks.push(b);
    pending += b.length;
    if (pending > 1 << 22) flush();
  };
  const i32 = (...xs: number[]) => {
    const b = Buffer.alloc(4 * xs.length);
    xs.forEach((x, i) => b.writeInt32LE(x, 4 * i));
    put(b);
  };
  try {
    put(Buffer.from([0x6c, 0x6d, 0x67, 0x67])); // 0x67676d6c little-endian
    const d = dims;
    i32(d.n_vocab, d.n_audio_ctx, d.n_audio_state, d.n_audio_head, d.n_audio_layer, d.n_text_ctx, d.n_text_state, d.n_text_head, d.n_text_layer, d.n_mels, useF16 ? 1 : 0);
    // mel filter bank: n_mel x n_fft (201 = 400-point FFT / 2 + 1), non-negative like a real one
    const nFft = 201;
    i32(d.n_mels, nFft);
    const filters = Buffer.alloc(4 * d.n_mels * nFft);
    for (let i = 0; i < d.n_mels * nFft; i++) filters.writeFloatLE(Math.abs(rand()) * 0.01, 4 * i);
    put(filters);
    // vocabulary: the text tokens only (50256 english, 50257 multilingual, whose id 50256 is the empty string, as in
    // the published files); the loader names the special tokens (eot, sot, languages, timestamps) itself
    const multilingual = d.n_vocab >= N_VOCAB_MULTILINGUAL;
    const nWords = multilingual ? 50257 : 50256;
    i32(nWords);
    for (let i = 0; i < nWords; i++) {
      // id 220 is the lone space, as in GPT-2's vocabulary: the decoder's blank suppression looks it up (token_to_id.at(" "))
      const w = multilingual && i === 50256 ? '' : i === 220 ? ' ' : (i % 3 === 0 ? '' : ' ') + WORDS[i % WORDS.length]!;
      const b = Buffer.from(w, 'utf8');
      i32(b.length);
      if (b.length) put(b);
    }
    // tensors: name, shape as ggml's ne (innermost first), f32 or the weight type; scaled ~1/sqrt(fan-in)
    const tensor = (name: string, ne: number[], kind: 'w' | 'f32' | 'one' | 'zero') => {
      const n = ne.reduce((a, b) => a * b, 1);
      const half = kind === 'w' && useF16;
      const nameBuf = Buffer.from(name, 'utf8');
      i32(ne.length, nameBuf.length, half ? 1 : 0, ...ne);
      put(nameBuf);
      const scale = 1 / Math.sqrt(ne[0]!);
      if (half) {
        const b = Buffer.alloc(2 * n);
        for (let i = 0; i < n; i++) b.writeUInt16LE(f16(rand() * scale), 2 * i);
        put(b);
      } else {
        const b = Buffer.alloc(4 * n);
        if (kind !== 'zero') for (let i = 0; i < n; i++) b.writeFloatLE(kind === 'one' ? 1 : rand() * scale, 4 * i);
        put(b);
      }
    };
    const block = (prefix: string, s: number, cross: boolean) => {
      const attn = (a: string) => {
        tensor(`${prefix}.${a}_ln.weight`, [s], 'one');
        tensor(`${prefix}.${a}_ln.bias`, [s], 'zero');
        tensor(`${prefix}.${a}.query.weight`, [s, s], 'w');
        tensor(`${prefix}.${a}.query.bias`, [s], 'zero');
        tensor(`${prefix}.${a}.key.weight`, [s, s], 'w');
        tensor(`${prefix}.${a}.value.weight`, [s, s], 'w');
        tensor(`${prefix}.${a}.value.bias`, [s], 'zero');
        tensor(`${prefix}.${a}.out.weight`, [s, s], 'w');
        tensor(`${prefix}.${a}.out.bias`, [s], 'zero');
      };
      tensor(`${prefix}.mlp_ln.weight`, [s], 'one');
      tensor(`${prefix}.mlp_ln.bias`, [s], 'zero');
      tensor(`${prefix}.mlp.0.weight`, [s, 4 * s], 'w');
      tensor(`${prefix}.mlp.0.bias`, [4 * s], 'zero');
      tensor(`${prefix}.mlp.2.weight`, [4 * s, s], 'w');
      tensor(`${prefix}.mlp.2.bias`, [s], 'zero');
      attn('attn');
      if (cross) attn('cross_attn');
    };
    const s = d.n_audio_state;
    tensor('encoder.positional_embedding', [s, d.n_audio_ctx], 'f32');
    // the convolutions are f16 in an f16 file (whisper.cpp's vtype), f32 otherwise
    tensor('encoder.conv1.weight', [3, d.n_mels, s], 'w');
    tensor('encoder.conv1.bias', [1, s], 'zero');
    tensor('encoder.conv2.weight', [3, s, s], 'w');
    tensor('encoder.conv2.bias', [1, s], 'zero');
    tensor('encoder.ln_post.weight', [s], 'one');
    tensor('encoder.ln_post.bias', [s], 'zero');
    for (let i = 0; i < d.n_audio_layer; i++) block(`encoder.blocks.${i}`, s, false);
    const t = d.n_text_state;
    tensor('decoder.positional_embedding', [t, d.n_text_ctx], 'f32');
    tensor('decoder.token_embedding.weight', [t, d.n_vocab], 'w');
    tensor('decoder.ln.weight', [t], 'one');
    tensor('decoder.ln.bias', [t], 'zero');
    for (let i = 0; i < d.n_text_layer; i++) block(`decoder.blocks.${i}`, t, true);
    flush();
  } finally {
    closeSync(fd);
  }
  return size;
}
