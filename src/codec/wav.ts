/**
 * WAV (RIFF) helpers: a streaming header with unknown length, a complete file, and a parser for
 * 16-bit PCM files (the only WAV flavour decoded without ffmpeg).
 */

/** Data length written in a streamed header, where the length is not known yet. */
export const UNKNOWN_LENGTH = 0xffffffff;

/**
 * A 44-byte canonical WAV header for 16-bit PCM. With the default `dataBytes` (unknown) both the RIFF
 * size and the data size are 0xFFFFFFFF, which players and ffmpeg read as "until end of stream".
 */
export function wavHeader(sampleRate: number, channels = 1, dataBytes: number = UNKNOWN_LENGTH): Buffer {
  const h = Buffer.alloc(44);
  const blockAlign = channels * 2;
  h.write('RIFF', 0, 'ascii');
  h.writeUInt32LE(dataBytes === UNKNOWN_LENGTH ? UNKNOWN_LENGTH : Math.min(UNKNOWN_LENGTH, 36 + dataBytes), 4);
  h.write('WAVE', 8, 'ascii');
  h.write('fmt ', 12, 'ascii');
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(channels, 22);
  h.writeUInt32LE(sampleRate, 24);
  h.writeUInt32LE(sampleRate * blockAlign, 28);
  h.writeUInt16LE(blockAlign, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36, 'ascii');
  h.writeUInt32LE(dataBytes, 40);
  return h;
}

/** A complete mono 16-bit WAV file. */
export function encodeWav(samples: Int16Array, sampleRate: number): Buffer {
  return Buffer.concat([wavHeader(sampleRate, 1, samples.byteLength), int16ToBuffer(samples)]);
}

/** The little-endian bytes of Int16 samples (a view, not a copy, on little-endian hosts). */
export function int16ToBuffer(samples: Int16Array): Buffer {
  if (LITTLE_ENDIAN) return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const b = Buffer.alloc(samples.byteLength);
  for (let i = 0; i < samples.length; i++) b.writeInt16LE(samples[i]!, i * 2);
  return b;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export interface ParsedWav {
  sampleRate: number;
  channels: number;
  /** interleaved when channels > 1 */
  samples: Int16Array;
}

export function isWav(bytes: Uint8Array): boolean {
  return bytes.length >= 12 && ascii(bytes, 0, 4) === 'RIFF' && ascii(bytes, 8, 4) === 'WAVE';
}

function ascii(b: Uint8Array, off: number, len: number): string {
  return String.fromCharCode(...b.subarray(off, off + len));
}

/**
 * Parses a 16-bit PCM WAV (format tag 1, or WAVE_FORMAT_EXTENSIBLE with PCM subformat). Returns null
 * when the file is a WAV of another flavour (float, 24-bit, compressed), throws on a broken file.
 * A data size of 0 or 0xFFFFFFFF (streamed) means "to the end of the buffer".
 */
export function parseWav(bytes: Uint8Array): ParsedWav {
  const r = tryParseWav(bytes);
  if (!r) throw new Error('not a 16-bit PCM WAV file');
  return r;
}

export function tryParseWav(bytes: Uint8Array): ParsedWav | null {
  if (!isWav(bytes)) throw new Error('not a RIFF/WAVE file');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let off = 12;
  let fmt: { tag: number; channels: number; rate: number; bits: number } | undefined;
  while (off + 8 <= bytes.length) {
    const id = ascii(bytes, off, 4);
    let size = view.getUint32(off + 4, true);
    const body = off + 8;
    if (id === 'fmt ') {
      if (size < 16 || body + 16 > bytes.length) throw new Error('truncated WAV fmt chunk');
      let tag = view.getUint16(body, true);
      if (tag === 0xfffe && size >= 26) tag = view.getUint16(body + 24, true); // extensible: subformat GUID
      fmt = {
        tag,
        channels: view.getUint16(body + 2, true),
        rate: view.getUint32(body + 4, true),
        bits: view.getUint16(body + 14, true),
      };
    } else if (id === 'data') {
      if (!fmt) throw new Error('WAV data before fmt chunk');
      if (fmt.tag !== 1 || fmt.bits !== 16) return null;
      if (fmt.channels < 1 || fmt.rate < 1) throw new Error('invalid WAV format');
      if (size === 0 || size === UNKNOWN_LENGTH || body + size > bytes.length) size = bytes.length - body;
      const frameBytes = 2 * fmt.channels;
      size -= size % frameBytes;
      const samples = new Int16Array(size / 2);
      if (LITTLE_ENDIAN && (bytes.byteOffset + body) % 2 === 0) {
        samples.set(new Int16Array(bytes.buffer, bytes.byteOffset + body, size / 2));
      } else {
        for (let i = 0; i < samples.length; i++) samples[i] = view.getInt16(body + i * 2, true);
      }
      return { sampleRate: fmt.rate, channels: fmt.channels, samples };
    }
    if (size === UNKNOWN_LENGTH) break;
    off = body + size + (size & 1);
  }
  throw new Error('WAV file has no data chunk');
}
