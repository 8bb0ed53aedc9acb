/**
 * A piper voice the tests build: an ONNX model with the inputs and output of a real piper (VITS) export, and its
 * `.onnx.json`, written byte by byte (ONNX is protobuf; no onnx package needed). sherpa-onnx loads and runs it for
 * real; only the weights are missing. Its graph makes what matters observable:
 *
 *   output[1, 1, N] = 0.3 * sin(2 pi * f * n / sample_rate),  N = 256 * len(input) * length_scale,
 *   f = BASE_HZ * (sid + 1)
 *
 * so the speaker id that reached the model is the tone's frequency, and the speed (length_scale = 1 / speed) its
 * duration. Like the files in rhasspy/piper-voices, the ONNX carries none of the metadata sherpa-onnx reads
 * (sample_rate, n_speakers, comment=piper...): the engine adds them, as sherpa-onnx's conversion scripts do.
 * `withSherpaMetadata` writes them into the file instead (the form of sherpa-onnx's own vits-piper-* exports).
 */

/** The tone of speaker 0; speaker k speaks at (k + 1) times it. */
export const PIPER_TEST_BASE_HZ = 110;
/** samples per input token at length_scale 1 */
export const PIPER_TEST_HOP = 256;

// ---------------------------------------------------------------- protobuf writing

function varint(n: number | bigint): number[] {
  let v = BigInt.asUintN(64, BigInt(n));
  const out: number[] = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}

const key = (field: number, wire: number) => varint((field << 3) | wire);
const int = (field: number, n: number | bigint) => Buffer.from([...key(field, 0), ...varint(n)]);
const bytes = (field: number, b: Uint8Array | string) => {
  const body = typeof b === 'string' ? Buffer.from(b, 'utf8') : Buffer.from(b);
  return Buffer.concat([Buffer.from([...key(field, 2), ...varint(body.length)]), body]);
};
const msg = (field: number, ...parts: Buffer[]) => bytes(field, Buffer.concat(parts));
const FLOAT = 1;
const INT64 = 7;

/** TensorProto: a constant (dims, type, raw little-endian data). */
function tensor(field: number, name: string, type: number, dims: number[], values: number[]): Buffer {
  const raw = Buffer.alloc(values.length * (type === FLOAT ? 4 : 8));
  values.forEach((v, i) => (type === FLOAT ? raw.writeFloatLE(v, i * 4) : raw.writeBigInt64LE(BigInt(v), i * 8)));
  return msg(field, ...dims.map((d) => int(1, d)), int(2, type), bytes(8, name), bytes(9, raw));
}

/** ValueInfoProto of a tensor; a string dim is symbolic. */
function valueInfo(field: number, name: string, type: number, dims: (number | string)[]): Buffer {
  const shape = msg(2, ...dims.map((d) => msg(1, typeof d === 'number' ? int(1, d) : bytes(2, d))));
  return msg(field, bytes(1, name), msg(2, msg(1, int(1, type), shape)));
}

interface Attr {
  name: string;
  i?: number;
}

function node(op: string, inputs: string[], outputs: string[], attrs: Attr[] = []): Buffer {
  return msg(
    1,
    ...inputs.map((i) => bytes(1, i)),
    ...outputs.map((o) => bytes(2, o)),
    bytes(3, `${op}_${outputs[0]}`),
    bytes(4, op),
    // AttributeProto: name, i, type INT (2)
    ...attrs.map((a) => msg(5, bytes(1, a.name), int(3, a.i ?? 0), int(20, 2))),
  );
}

/** StringStringEntryProto of ModelProto.metadata_props (field 14): appending these to a model adds metadata. */
export function onnxMetadataProps(meta: Readonly<Record<string, string | number>>): Buffer {
  return Buffer.concat(Object.entries(meta).map(([k, v]) => msg(14, bytes(1, k), bytes(2, String(v)))));
}

export interface PiperTestVoiceOptions {
  sampleRate?: number;
  /** speakers; 1 makes a single-speaker model (no sid input, as piper exports those) */
  speakers?: number;
  /** write sherpa-onnx's metadata into the ONNX (as its vits-piper-* conversions do) */
  withSherpaMetadata?: boolean;
}

/** The ONNX bytes of the test voice. */
export function piperTestOnnx(o: PiperTestVoiceOptions = {}): Buffer {
  const sr = o.sampleRate ?? 22050;
  const speakers = o.speakers ?? 13;
  const multi = speakers > 1;
  const nodes = [
    node('Shape', ['input'], ['x_shape']),
    node('Gather', ['x_shape', 'one_i'], ['tokens'], [{ name: 'axis', i: 0 }]),
    node('Cast', ['tokens'], ['tokens_f'], [{ name: 'to', i: FLOAT }]),
    node('Gather', ['scales', 'one_i'], ['length_scale'], [{ name: 'axis', i: 0 }]),
    node('Mul', ['tokens_f', 'hop'], ['n0']),
    node('Mul', ['n0', 'length_scale'], ['n']),
    node('Range', ['zero_f', 'n', 'one_f'], ['t']),
    ...(multi
      ? [node('Cast', ['sid'], ['sid_f'], [{ name: 'to', i: FLOAT }]), node('Add', ['sid_f', 'one_f'], ['sid1']), node('Mul', ['sid1', 'omega'], ['w'])]
      : [node('Identity', ['omega'], ['w'])]),
    node('Mul', ['t', 'w'], ['phase']),
    node('Sin', ['phase'], ['wave']),
    node('Mul', ['wave', 'amp'], ['scaled']),
    node('Reshape', ['scaled', 'out_shape'], ['output']),
  ];
  const inits = [
    tensor(5, 'one_i', INT64, [], [1]),
    tensor(5, 'hop', FLOAT, [], [PIPER_TEST_HOP]),
    tensor(5, 'zero_f', FLOAT, [], [0]),
    tensor(5, 'one_f', FLOAT, [], [1]),
    tensor(5, 'omega', FLOAT, multi ? [1] : [], [(2 * Math.PI * PIPER_TEST_BASE_HZ) / sr]),
    tensor(5, 'amp', FLOAT, [], [0.3]),
    tensor(5, 'out_shape', INT64, [3], [1, 1, -1]),
  ];
  const inputs = [
    valueInfo(11, 'input', INT64, [1, 'phonemes']),
    valueInfo(11, 'input_lengths', INT64, [1]),
    valueInfo(11, 'scales', FLOAT, [3]),
    ...(multi ? [valueInfo(11, 'sid', INT64, [1])] : []),
  ];
  const graph = msg(7, ...nodes, bytes(2, 'piper-test'), ...inits, ...inputs, valueInfo(12, 'output', FLOAT, [1, 1, 'time']));
  const model = Buffer.concat([
    int(1, 8), // ir_version
    bytes(2, 'portico-test'), // producer_name
    graph,
    msg(8, bytes(1, ''), int(2, 13)), // opset_import: default domain, opset 13
  ]);
  if (!o.withSherpaMetadata) return model;
  return Buffer.concat([
    model,
    onnxMetadataProps({
      model_type: 'vits',
      comment: 'piper',
      language: 'English',
      voice: 'en-us',
      has_espeak: 1,
      n_speakers: speakers,
      sample_rate: sr,
      add_blank: 0,
      punctuation: '; : , . ! ? ¡ ¿ — … " « » “ ” ( )',
    }),
  ]);
}

/** The `.onnx.json` piper publishes next to each voice (the parts sherpa-onnx's conversion and Portico read). */
export function piperTestConfig(o: PiperTestVoiceOptions = {}): object {
  const speakers = o.speakers ?? 13;
  // piper's English phoneme map (a part of it: every symbol espeak-ng gives for plain English text)
  const symbols = [
    '_',
    '^',
    '$',
    ' ',
    '!',
    "'",
    '(',
    ')',
    ',',
    '-',
    '.',
    ':',
    ';',
    '?',
    'a',
    'b',
    'c',
    'd',
    'e',
    'f',
    'h',
    'i',
    'j',
    'k',
    'l',
    'm',
    'n',
    'o',
    'p',
    'q',
    'r',
    's',
    't',
    'u',
    'v',
    'w',
    'x',
    'y',
    'z',
    'æ',
    'ç',
    'ð',
    'ø',
    'ħ',
    'ŋ',
    'œ',
    'ǀ',
    'ǁ',
    'ǂ',
    'ǃ',
    'ɐ',
    'ɑ',
    'ɒ',
    'ɓ',
    'ɔ',
    'ɕ',
    'ɖ',
    'ɗ',
    'ɘ',
    'ə',
    'ɚ',
    'ɛ',
    'ɜ',
    'ɞ',
    'ɟ',
    'ɠ',
    'ɡ',
    'ɢ',
    'ɣ',
    'ɤ',
    'ɥ',
    'ɦ',
    'ɧ',
    'ɨ',
    'ɪ',
    'ɫ',
    'ɬ',
    'ɭ',
    'ɮ',
    'ɯ',
    'ɰ',
    'ɱ',
    'ɲ',
    'ɳ',
    'ɴ',
    'ɵ',
    'ɶ',
    'ɸ',
    'ɹ',
    'ɺ',
    'ɻ',
    'ɽ',
    'ɾ',
    'ʀ',
    'ʁ',
    'ʂ',
    'ʃ',
    'ʄ',
    'ʈ',
    'ʉ',
    'ʊ',
    'ʋ',
    'ʌ',
    'ʍ',
    'ʎ',
    'ʏ',
    'ʐ',
    'ʑ',
    'ʒ',
    'ʔ',
    'ʕ',
    'ʘ',
    'ʙ',
    'ʛ',
    'ʜ',
    'ʝ',
    'ʟ',
    'ʡ',
    'ʢ',
    'ʲ',
    'ˈ',
    'ˌ',
    'ː',
    'ˑ',
    '˞',
    'β',
    'θ',
    'χ',
    'ᵻ',
    'ⱱ',
    '0',
    '1',
    '2',
    '3',
    '4',
    '5',
    '6',
    '7',
    '8',
    '9',
    '\u0327',
    '\u0303',
    '\u032a',
    '\u032f',
    '\u0329',
    'ʰ',
    'ˤ',
    'ε',
    '↓',
    '#',
    '"',
    '↑',
  ];
  return {
    audio: { sample_rate: o.sampleRate ?? 22050, quality: 'medium' },
    espeak: { voice: 'en-us' },
    inference: { noise_scale: 0.667, length_scale: 1, noise_w: 0.8 },
    phoneme_type: 'espeak',
    phoneme_map: {},
    phoneme_id_map: Object.fromEntries(symbols.map((s, i) => [s, [i]])),
    num_symbols: symbols.length,
    num_speakers: speakers,
    speaker_id_map: speakers > 1 ? Object.fromEntries(Array.from({ length: speakers }, (_, i) => [`speaker${i}`, i])) : {},
    piper_version: '1.0.0',
    language: { code: 'en_US', family: 'en', region: 'US', name_native: 'English', name_english: 'English', country_english: 'United States' },
    dataset: 'portico-test',
  };
}
