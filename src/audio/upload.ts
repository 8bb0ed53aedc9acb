/**
 * The multipart body of /audio/transcriptions and /audio/translations, read as a stream: text fields into a map,
 * the `file` part into memory, bounded (25 MiB file limit -> 413, counted as the body arrives).
 */
import type { FastifyRequest } from 'fastify';
import type { AudioUpload } from '../engines/types.js';
import { AppError } from '../platform/errors.js';
import { MAX_UPLOAD_BYTES, type FieldMap } from './service.js';

/** multipart overhead allowed on top of the file before a request is refused from its Content-Length alone */
const MULTIPART_SLACK = 1024 * 1024;
const MAX_FIELDS = 64;
const MAX_FIELD_BYTES = 64 * 1024;

/** the whole body, whatever its framing (Content-Length or chunked) and however many parts it has */
const MAX_BODY_BYTES = MAX_UPLOAD_BYTES + MULTIPART_SLACK;

function tooLarge(read?: number): AppError {
  return new AppError(
    'payload_too_large',
    `Maximum content size limit (${MAX_UPLOAD_BYTES}) exceeded${read ? ` (${read} bytes read)` : ''}: the audio file must be at most 25 MiB.`,
    'file',
  );
}

/** Reads the multipart body as a stream: text fields into a map, the `file` part into memory (bounded). */
export async function readUpload(req: FastifyRequest): Promise<{ fields: FieldMap; file?: AudioUpload }> {
  if (!req.isMultipart()) {
    throw new AppError('validation_error', `Send the audio as multipart/form-data with a 'file' part (got Content-Type ${req.headers['content-type'] ?? 'none'}).`, 'file');
  }
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_UPLOAD_BYTES + MULTIPART_SLACK) throw tooLarge(declared);
  const fields: FieldMap = {};
  let file: AudioUpload | undefined;
  let nFields = 0;
  // the body is counted as it arrives: a chunked body (no Content-Length) or one of many parts meets the same
  // limit while it streams, and what is over is never read (issue 9, §2)
  let received = 0;
  let over!: (e: AppError) => void;
  const overLimit = new Promise<never>((_, reject) => (over = reject));
  overLimit.catch(() => {});
  const count = (c: Buffer) => {
    received += c.length;
    if (received > MAX_BODY_BYTES) {
      req.raw.off('data', count);
      // nothing more is parsed or kept: the rest is read and dropped while the 413 goes out (closing a socket
      // with data unread would reset it, and the client would never see the answer), then the connection is
      // cut 2 s later, whatever the client still sends
      req.raw.unpipe();
      req.raw.resume();
      const socket = req.raw.socket;
      setTimeout(() => socket.destroy(), 2000).unref();
      over(tooLarge(received));
    }
  };
  req.raw.on('data', count);
  const read = async () => {
    for await (const part of req.parts({ limits: { fileSize: MAX_UPLOAD_BYTES, files: 4, fields: MAX_FIELDS, fieldSize: MAX_FIELD_BYTES, parts: MAX_FIELDS + 4 } })) {
      if (part.type === 'file') {
        if (part.fieldname === 'file' && !file) {
          const bytes = await part.toBuffer();
          file = { bytes, filename: part.filename || 'audio', mimeType: part.mimetype };
        } else {
          // another file part is not kept: read past it without holding it
          part.file.resume();
          await new Promise<void>((r, j) => (part.file.once('end', r), part.file.once('error', j)));
        }
        continue;
      }
      if (part.fieldnameTruncated || part.valueTruncated)
        throw new AppError('validation_error', `The field '${part.fieldname}' is too large (at most ${MAX_FIELD_BYTES} bytes).`, part.fieldname);
      if (++nFields > MAX_FIELDS) throw new AppError('validation_error', `Too many fields (at most ${MAX_FIELDS}).`);
      (fields[part.fieldname] ??= []).push(typeof part.value === 'string' ? part.value : String(part.value));
    }
  };
  try {
    const reading = read();
    reading.catch(() => {});
    await Promise.race([reading, overLimit]);
  } catch (e) {
    if (e instanceof AppError) throw e;
    const code = (e as { code?: string }).code;
    if (code === 'FST_REQ_FILE_TOO_LARGE') throw tooLarge();
    if (code === 'FST_FILES_LIMIT') throw new AppError('validation_error', "Too many files: send one audio file in the 'file' field.", 'file');
    if (code === 'FST_FIELDS_LIMIT' || code === 'FST_PARTS_LIMIT') throw new AppError('validation_error', `Too many fields (at most ${MAX_FIELDS}).`);
    if (code === 'FST_PROTO_VIOLATION') throw new AppError('validation_error', 'A field name is not allowed.');
    throw new AppError('validation_error', `The multipart/form-data body could not be read: ${(e as Error).message}`);
  } finally {
    req.raw.off('data', count);
  }
  return { fields, file };
}
