/**
 * What makes a downloaded file a model Portico may serve: the format (GGUF magic for llama.cpp, the ggml magic
 * of whisper.cpp models), the size and SHA-256 the hub announced, and for GGUF a header node-llama-cpp can parse
 * (which also tells a text model from an embedding model).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { PullError } from './errors.js';

export type ModelFormat = 'gguf' | 'ggml' | 'onnx';
export type ModelKind = 'text' | 'embedding' | 'transcription' | 'speech';

/**
 * Whether the first bytes can be an ONNX model (a protobuf ModelProto begins with its ir_version, field 1, a small
 * number). ONNX has no magic number: only asked of files a reference says are ONNX (piper voices).
 */
export function looksLikeOnnx(head: Uint8Array): boolean {
  return head.length >= 2 && head[0] === 0x08 && head[1]! >= 3 && head[1]! <= 30;
}

/** The format the first bytes announce, or undefined. */
export function sniffFormat(head: Uint8Array): ModelFormat | undefined {
  const b = Buffer.from(head);
  if (b.length >= 4 && b.toString('latin1', 0, 4) === 'GGUF') return 'gguf';
  // whisper.cpp writes GGML_FILE_MAGIC 0x67676d6c as a little-endian uint32: "lmgg"
  if (b.length >= 4 && b.readUInt32LE(0) === 0x67676d6c) return 'ggml';
  return undefined;
}

/** Says what the bytes are instead, for the error message. */
export function describeBytes(head: Uint8Array): string {
  const b = Buffer.from(head);
  if (b.length === 0) return 'it is empty';
  const text = b.toString('latin1');
  if (/^\s*<(!doctype|html|\?xml)/i.test(text)) return 'it is an HTML/XML page (a web page, not the file itself?)';
  if (text.startsWith('version https://git-lfs')) return 'it is a Git LFS pointer, not the file';
  if (/^\s*[{[]/.test(text)) return 'it is JSON';
  if (b.length >= 4) {
    const m = b.readUInt32LE(0);
    if (m === 0x67676a74 || m === 0x67676d66) return 'it is a pre-GGUF llama.cpp file (GGJT/GGMF), which current llama.cpp cannot load';
  }
  if (b[0] === 0x50 && b[1] === 0x4b) return 'it is a ZIP archive (a PyTorch .bin/.pt checkpoint?)';
  if (b.length >= 8 && b.readBigUInt64LE(0) < 100_000_000n && text.slice(8).startsWith('{')) return 'it is a safetensors file';
  const printable = [...b.subarray(0, 8)].map((c) => (c >= 0x20 && c < 0x7f ? String.fromCharCode(c) : '.')).join('');
  return `it starts with "${printable}" (${b.subarray(0, 8).toString('hex')})`;
}

export function notAModel(what: string, head: Uint8Array, expected: ModelFormat | 'any'): PullError {
  const want =
    expected === 'ggml'
      ? 'a whisper.cpp ggml model'
      : expected === 'gguf'
        ? 'a GGUF model'
        : expected === 'onnx'
          ? 'an ONNX model (a piper voice)'
          : 'a GGUF model (or a whisper.cpp ggml model)';
  return new PullError('not_a_model', `${what} is not ${want}: ${describeBytes(head)}`);
}

/** Hashes the file, reporting progress; compares size and SHA-256 when they are known. */
export async function verifyFile(
  path: string,
  expected: { size?: number; sha256?: string },
  what: string,
  onProgress?: (done: number, total: number) => void,
): Promise<{ size: number; sha256: string }> {
  const { size } = await stat(path);
  if (expected.size !== undefined && size !== expected.size) {
    throw new PullError('verification_failed', `${what}: the download has ${size} bytes, the hub announced ${expected.size}; nothing was kept, run the pull again`);
  }
  const hash = createHash('sha256');
  let done = 0;
  let last = 0;
  await new Promise<void>((resolve, reject) => {
    const s = createReadStream(path, { highWaterMark: 1 << 20 });
    s.on('data', (chunk) => {
      hash.update(chunk);
      done += chunk.length;
      if (onProgress && (done - last >= 64 << 20 || done === size)) {
        last = done;
        onProgress(done, size);
      }
    });
    s.on('error', reject);
    s.on('end', resolve);
  });
  const sha256 = hash.digest('hex');
  if (expected.sha256 && sha256 !== expected.sha256) {
    throw new PullError(
      'verification_failed',
      `${what}: SHA-256 of the download is ${sha256}, the hub announced ${expected.sha256}; the file was corrupted on the way and was not kept. Run the pull again`,
    );
  }
  return { size, sha256 };
}

/** Encoder architectures llama.cpp runs only as embedding models. */
const EMBEDDING_ARCHITECTURES = new Set(['bert', 'nomic-bert', 'nomic-bert-moe', 'jina-bert-v2', 'jina-bert-v3', 'modern-bert', 'neo-bert', 'eurobert', 't5encoder']);

/**
 * Reads the GGUF header with node-llama-cpp (no weights are loaded) and classifies the model: an embedding model
 * when its architecture is an encoder or it declares a pooling type (the converters write `<arch>.pooling_type`
 * only for embedding models, e.g. Qwen3-Embedding), otherwise a text model.
 */
export async function inspectGguf(path: string, what: string): Promise<{ architecture?: string; kind: 'text' | 'embedding'; title?: string }> {
  const { readGgufFileInfo } = await import('node-llama-cpp');
  let info: Awaited<ReturnType<typeof readGgufFileInfo>>;
  try {
    info = await readGgufFileInfo(path, { readTensorInfo: false, logWarnings: false });
  } catch (e) {
    throw new PullError('not_a_model', `${what} starts like a GGUF but its header cannot be read: ${(e as Error).message}`);
  }
  const meta = info.metadata as unknown as Record<string, Record<string, unknown> | undefined>;
  const architecture = typeof meta.general?.architecture === 'string' ? (meta.general.architecture as string) : undefined;
  const archMeta = architecture ? meta[architecture] : undefined;
  const pooling = archMeta && 'pooling_type' in archMeta;
  const kind = (architecture && EMBEDDING_ARCHITECTURES.has(architecture)) || pooling ? 'embedding' : 'text';
  const title = typeof meta.general?.name === 'string' ? (meta.general.name as string) : undefined;
  return { architecture, kind, title };
}
