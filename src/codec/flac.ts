/**
 * FLAC headers. ffmpeg writes a FLAC's STREAMINFO before the first frame and fills in its total samples and MD5 at
 * the end, by seeking back: to a pipe (what a streamed answer is) it cannot, and they stay 0 ("unknown", which the
 * format allows): ffprobe then finds no duration. When the whole audio is known, they are filled in here.
 */
import { createHash } from 'node:crypto';

/** "fLaC", then the STREAMINFO block (always the first): a 4-byte block header and 34 bytes. */
const STREAMINFO = 8;

/**
 * The FLAC `flac` (a whole file, 16-bit mono or interleaved) with STREAMINFO's total samples and MD5 set from the
 * PCM it encodes (`pcm`: 16-bit little-endian samples, exactly what the encoder was fed: FLAC is lossless and adds
 * no priming). Anything else (not FLAC, not 16-bit) is returned as it is.
 */
export function withFlacLength(flac: Buffer, pcm: Buffer): Buffer {
  if (flac.length < STREAMINFO + 34 || flac.toString('ascii', 0, 4) !== 'fLaC' || (flac[4]! & 0x7f) !== 0) return flac;
  const s = STREAMINFO;
  const channels = ((flac[s + 12]! >> 1) & 0x07) + 1;
  const bits = (((flac[s + 12]! & 0x01) << 4) | (flac[s + 13]! >> 4)) + 1;
  if (bits !== 16) return flac;
  const total = Math.floor(pcm.length / (2 * channels));
  const out = Buffer.from(flac);
  // total samples: 36 bits, the low 4 bits of byte 13 and bytes 14-17 of STREAMINFO
  out[s + 13] = (out[s + 13]! & 0xf0) | (Math.floor(total / 2 ** 32) & 0x0f);
  out.writeUInt32BE(total % 2 ** 32, s + 14);
  // the MD5 of the samples as signed little-endian integers, interleaved: what a decoder checks its output against
  createHash('md5')
    .update(pcm.subarray(0, total * 2 * channels))
    .digest()
    .copy(out, s + 18);
  return out;
}

/** STREAMINFO's total samples (0: unknown), or undefined when the bytes are not FLAC. */
export function flacTotalSamples(flac: Uint8Array): number | undefined {
  if (flac.length < STREAMINFO + 34 || String.fromCharCode(...flac.subarray(0, 4)) !== 'fLaC') return undefined;
  const s = STREAMINFO;
  return (flac[s + 13]! & 0x0f) * 2 ** 32 + ((flac[s + 14]! << 24) >>> 0) + (flac[s + 15]! << 16) + (flac[s + 16]! << 8) + flac[s + 17]!;
}

/**
 * A whole FLAC file that was streamed (STREAMINFO's total samples 0) with its total samples filled in, counted from
 * its frames: each frame header says its block size and its number (fixed block sizes, what ffmpeg writes) or its
 * first sample (variable). A header is taken only where its CRC-8 holds and its number is the next one, so bytes of
 * audio that happen to look like a header are not. The MD5 stays 0 (unknown: the samples are not decoded here).
 * Returned as it is when it is not FLAC, already has a count, or no frame is found.
 */
export function withFlacFrameCount(flac: Buffer): Buffer {
  if (flacTotalSamples(flac) !== 0) return flac;
  let total = 0;
  let frames = 0;
  for (let i = firstFrame(flac); i >= 0 && i + 6 <= flac.length; i++) {
    if (flac[i] !== 0xff || (flac[i + 1]! & 0xfe) !== 0xf8) continue;
    const h = frameHeader(flac, i);
    if (!h) continue;
    const variable = flac[i + 1] === 0xf9;
    if (variable ? h.number !== total : h.number !== frames) continue;
    frames++;
    total += h.blockSize;
    i += h.length - 1;
  }
  if (frames === 0) return flac;
  const out = Buffer.from(flac);
  out[STREAMINFO + 13] = (out[STREAMINFO + 13]! & 0xf0) | (Math.floor(total / 2 ** 32) & 0x0f);
  out.writeUInt32BE(total % 2 ** 32, STREAMINFO + 14);
  return out;
}

/** Where the frames start: after the last metadata block. */
function firstFrame(flac: Buffer): number {
  let off = 4;
  for (;;) {
    if (off + 4 > flac.length) return -1;
    const last = (flac[off]! & 0x80) !== 0;
    off += 4 + flac.readUIntBE(off + 1, 3);
    if (last) return off;
  }
}

/** The frame header at `i` (sync code already seen): its number, block size and length, or undefined if it is not one. */
function frameHeader(b: Buffer, i: number): { number: number; blockSize: number; length: number } | undefined {
  const bsCode = b[i + 2]! >> 4;
  const srCode = b[i + 2]! & 0x0f;
  if (bsCode === 0 || srCode === 15 || (b[i + 3]! & 0x01) !== 0 || b[i + 3]! >> 4 > 10 || ((b[i + 3]! >> 1) & 0x07) === 3 || ((b[i + 3]! >> 1) & 0x07) === 7) return undefined;
  let p = i + 4;
  // the number, UTF-8 style (up to 36 bits)
  const first = b[p++];
  if (first === undefined) return undefined;
  let extra = 0;
  let number: number;
  if (first < 0x80) number = first;
  else {
    let mask = 0x40;
    while (first & mask) {
      extra++;
      mask >>= 1;
    }
    if (extra === 0 || extra > 6) return undefined;
    number = first & (mask - 1);
    for (let k = 0; k < extra; k++) {
      const c = b[p++];
      if (c === undefined || (c & 0xc0) !== 0x80) return undefined;
      number = number * 64 + (c & 0x3f);
    }
  }
  let blockSize: number;
  if (bsCode === 1) blockSize = 192;
  else if (bsCode <= 5) blockSize = 576 * 2 ** (bsCode - 2);
  else if (bsCode === 6) blockSize = (b[p++] ?? -2) + 1;
  else if (bsCode === 7) {
    if (p + 2 > b.length) return undefined;
    blockSize = b.readUInt16BE(p) + 1;
    p += 2;
  } else blockSize = 256 * 2 ** (bsCode - 8);
  if (srCode === 12) p += 1;
  else if (srCode === 13 || srCode === 14) p += 2;
  if (p >= b.length || blockSize < 1 || crc8(b, i, p) !== b[p]) return undefined;
  return { number, blockSize, length: p + 1 - i };
}

/** FLAC's header CRC-8 (polynomial x^8 + x^2 + x + 1) of b[from, to). */
function crc8(b: Buffer, from: number, to: number): number {
  let crc = 0;
  for (let i = from; i < to; i++) {
    crc ^= b[i]!;
    for (let k = 0; k < 8; k++) crc = crc & 0x80 ? ((crc << 1) ^ 0x07) & 0xff : (crc << 1) & 0xff;
  }
  return crc;
}
