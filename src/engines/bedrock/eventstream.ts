/**
 * AWS's binary event-stream framing (application/vnd.amazon.eventstream), which ConverseStream answers in: each
 * message is a 12-byte prelude (total length, headers length, both big-endian uint32, and the prelude's CRC32),
 * the headers, the payload and the CRC32 of everything before it. A header is its name's length (1 byte), the
 * name, a type byte and the value; Bedrock's are strings (type 7: a 2-byte length then UTF-8). A CRC that does not
 * match is a broken stream, never a message read on a guess.
 */
import { crc32 } from 'node:zlib';

export interface EventMessage {
  headers: Record<string, string | number | boolean>;
  payload: Buffer;
}

/** a frame no decoder would take: the answer is broken */
export class FrameError extends Error {}

/** the largest message taken (the SDK's limit is 16 MiB too) */
const MAX_MESSAGE = 16 * 1024 * 1024;

function readHeaders(b: Buffer): EventMessage['headers'] {
  const out: EventMessage['headers'] = {};
  let i = 0;
  while (i < b.length) {
    const nameLen = b.readUInt8(i);
    const name = b.toString('utf8', i + 1, i + 1 + nameLen);
    i += 1 + nameLen;
    const type = b.readUInt8(i++);
    switch (type) {
      case 0:
        out[name] = true;
        break;
      case 1:
        out[name] = false;
        break;
      case 2:
        out[name] = b.readInt8(i);
        i += 1;
        break;
      case 3:
        out[name] = b.readInt16BE(i);
        i += 2;
        break;
      case 4:
        out[name] = b.readInt32BE(i);
        i += 4;
        break;
      case 5:
      case 8:
        out[name] = Number(b.readBigInt64BE(i));
        i += 8;
        break;
      case 6:
      case 7: {
        const len = b.readUInt16BE(i);
        out[name] = type === 7 ? b.toString('utf8', i + 2, i + 2 + len) : b.toString('base64', i + 2, i + 2 + len);
        i += 2 + len;
        break;
      }
      case 9:
        out[name] = b.toString('hex', i, i + 16);
        i += 16;
        break;
      default:
        throw new FrameError(`unknown event-stream header type ${type}`);
    }
  }
  return out;
}

/** Incremental: bytes in as they come, whole messages out (a message split across chunks waits for its end). */
export class EventStreamDecoder {
  private buf: Buffer = Buffer.alloc(0);

  constructor(private readonly onMessage: (m: EventMessage) => void) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= 12) {
      const total = this.buf.readUInt32BE(0);
      const headersLen = this.buf.readUInt32BE(4);
      if (crc32(this.buf.subarray(0, 8)) !== this.buf.readUInt32BE(8)) throw new FrameError('event-stream prelude checksum mismatch');
      if (total < 16 || total > MAX_MESSAGE || headersLen > total - 16) throw new FrameError(`event-stream message of impossible length ${total}`);
      if (this.buf.length < total) return;
      const msg = this.buf.subarray(0, total);
      this.buf = this.buf.subarray(total);
      if (crc32(msg.subarray(0, total - 4)) !== msg.readUInt32BE(total - 4)) throw new FrameError('event-stream message checksum mismatch');
      let headers: EventMessage['headers'];
      try {
        headers = readHeaders(msg.subarray(12, 12 + headersLen));
      } catch (e) {
        throw e instanceof FrameError ? e : new FrameError('unreadable event-stream headers');
      }
      this.onMessage({ headers, payload: msg.subarray(12 + headersLen, total - 4) });
    }
  }

  /** end of the body: bytes left over are a message cut short */
  end(): void {
    if (this.buf.length > 0) throw new FrameError('event-stream ended inside a message');
  }
}

/** One message with string headers (what Bedrock sends, and what the test mock writes). */
export function encodeMessage(headers: Record<string, string>, payload: Buffer | string): Buffer {
  const hs: Buffer[] = [];
  for (const [k, v] of Object.entries(headers)) {
    const name = Buffer.from(k, 'utf8');
    const value = Buffer.from(v, 'utf8');
    const h = Buffer.alloc(1 + name.length + 1 + 2 + value.length);
    h.writeUInt8(name.length, 0);
    name.copy(h, 1);
    h.writeUInt8(7, 1 + name.length);
    h.writeUInt16BE(value.length, 2 + name.length);
    value.copy(h, 4 + name.length);
    hs.push(h);
  }
  const hb = Buffer.concat(hs);
  const pb = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const total = 12 + hb.length + pb.length + 4;
  const out = Buffer.alloc(total);
  out.writeUInt32BE(total, 0);
  out.writeUInt32BE(hb.length, 4);
  out.writeUInt32BE(crc32(out.subarray(0, 8)), 8);
  hb.copy(out, 12);
  pb.copy(out, 12 + hb.length);
  out.writeUInt32BE(crc32(out.subarray(0, total - 4)), total - 4);
  return out;
}
