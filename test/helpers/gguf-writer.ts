/**
 * A minimal GGUF v3 writer (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): metadata key/values and
 * F32 tensors. Enough to produce small test models that llama.cpp loads.
 */

export const enum GgufType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

export type GgufValue =
  | { type: GgufType.UINT32 | GgufType.INT32 | GgufType.FLOAT32 | GgufType.UINT64 | GgufType.BOOL; value: number | boolean }
  | { type: GgufType.STRING; value: string }
  | { type: GgufType.ARRAY; itemType: GgufType.STRING; value: string[] }
  | { type: GgufType.ARRAY; itemType: GgufType.INT32 | GgufType.FLOAT32; value: ArrayLike<number> };

export const u32 = (value: number): GgufValue => ({ type: GgufType.UINT32, value });
export const i32 = (value: number): GgufValue => ({ type: GgufType.INT32, value });
export const f32 = (value: number): GgufValue => ({ type: GgufType.FLOAT32, value });
export const bool = (value: boolean): GgufValue => ({ type: GgufType.BOOL, value });
export const str = (value: string): GgufValue => ({ type: GgufType.STRING, value });
export const strArr = (value: string[]): GgufValue => ({ type: GgufType.ARRAY, itemType: GgufType.STRING, value });
export const i32Arr = (value: ArrayLike<number>): GgufValue => ({ type: GgufType.ARRAY, itemType: GgufType.INT32, value });
export const f32Arr = (value: ArrayLike<number>): GgufValue => ({ type: GgufType.ARRAY, itemType: GgufType.FLOAT32, value });

export interface GgufTensor {
  name: string;
  /** ggml order: ne[0] is the fastest-varying (row length) dimension */
  dims: number[];
  data: Float32Array;
}

const ALIGNMENT = 32;

class ByteSink {
  private chunks: Buffer[] = [];
  private cur = Buffer.alloc(1 << 16);
  private pos = 0;
  length = 0;

  private ensure(n: number) {
    if (this.pos + n <= this.cur.length) return;
    this.chunks.push(this.cur.subarray(0, this.pos));
    this.cur = Buffer.alloc(Math.max(1 << 16, n));
    this.pos = 0;
  }
  u8(v: number) {
    this.ensure(1);
    this.cur.writeUInt8(v, this.pos);
    this.pos += 1;
    this.length += 1;
  }
  u32(v: number) {
    this.ensure(4);
    this.cur.writeUInt32LE(v, this.pos);
    this.pos += 4;
    this.length += 4;
  }
  i32(v: number) {
    this.ensure(4);
    this.cur.writeInt32LE(v, this.pos);
    this.pos += 4;
    this.length += 4;
  }
  f32(v: number) {
    this.ensure(4);
    this.cur.writeFloatLE(v, this.pos);
    this.pos += 4;
    this.length += 4;
  }
  u64(v: number) {
    this.ensure(8);
    this.cur.writeBigUInt64LE(BigInt(v), this.pos);
    this.pos += 8;
    this.length += 8;
  }
  bytes(b: Uint8Array) {
    this.ensure(b.length);
    this.cur.set(b, this.pos);
    this.pos += b.length;
    this.length += b.length;
  }
  string(s: string) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.bytes(b);
  }
  pad(alignment: number) {
    while (this.length % alignment !== 0) this.u8(0);
  }
  toBuffer(): Buffer {
    return Buffer.concat([...this.chunks, this.cur.subarray(0, this.pos)]);
  }
}

function writeValue(s: ByteSink, v: GgufValue) {
  s.u32(v.type);
  switch (v.type) {
    case GgufType.UINT32:
      s.u32(Number(v.value));
      break;
    case GgufType.INT32:
      s.i32(Number(v.value));
      break;
    case GgufType.FLOAT32:
      s.f32(Number(v.value));
      break;
    case GgufType.UINT64:
      s.u64(Number(v.value));
      break;
    case GgufType.BOOL:
      s.u8(v.value ? 1 : 0);
      break;
    case GgufType.STRING:
      s.string(v.value);
      break;
    case GgufType.ARRAY: {
      s.u32(v.itemType);
      s.u64(v.value.length);
      if (v.itemType === GgufType.STRING) for (const x of v.value as string[]) s.string(x);
      else if (v.itemType === GgufType.INT32) for (let i = 0; i < v.value.length; i++) s.i32((v.value as ArrayLike<number>)[i]);
      else for (let i = 0; i < v.value.length; i++) s.f32((v.value as ArrayLike<number>)[i]);
      break;
    }
  }
}

/** Serializes a GGUF v3 file with F32 tensors. */
export function encodeGguf(metadata: Array<[string, GgufValue]>, tensors: GgufTensor[]): Buffer {
  const s = new ByteSink();
  s.bytes(Buffer.from('GGUF', 'ascii'));
  s.u32(3);
  s.u64(tensors.length);
  s.u64(metadata.length);
  for (const [key, value] of metadata) {
    s.string(key);
    writeValue(s, value);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    const n = t.dims.reduce((a, b) => a * b, 1);
    if (n !== t.data.length) throw new Error(`tensor ${t.name}: ${t.data.length} values for dims ${t.dims.join('x')}`);
    s.string(t.name);
    s.u32(t.dims.length);
    for (const d of t.dims) s.u64(d);
    s.u32(0); // GGML_TYPE_F32
    s.u64(offset);
    offsets.push(offset);
    offset += n * 4;
    offset = Math.ceil(offset / ALIGNMENT) * ALIGNMENT;
  }
  s.pad(ALIGNMENT);
  const dataStart = s.length;
  tensors.forEach((t, i) => {
    while (s.length - dataStart < offsets[i]) s.u8(0);
    s.bytes(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  });
  s.pad(ALIGNMENT);
  return s.toBuffer();
}
