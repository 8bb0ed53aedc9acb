/**
 * The frames of the WebSocket mode of /v1/responses (docs/api.md, "WebSocket mode"): what a client may send
 * (`response.create` messages, checked by the same schema and with the same messages as POST /v1/responses)
 * and the error frames Portico answers with.
 */
import { AppError, ERRORS, localizedMessage, type ErrorCode } from '../../platform/errors.js';
import { describeValidationError, lazyValidatorCompiler } from '../../platform/http/validation.js';
import { checkJsonShape } from '../../platform/http/json-shape.js';
import { shapeError } from '../../platform/http/json-body.js';
import { CreateResponseBody, notImplementedParameter, type CreateResponseRequest } from '../schemas.js';

/**
 * What `ws` hands a message listener (its RawData), named here so src/ needs no type package of `ws` (@types/ws is
 * a development dependency, and the app builds without those).
 */
export type RawData = Buffer | ArrayBuffer | Buffer[];

/** The part of a `ws` server-side WebSocket the WebSocket mode uses. */
export interface WsSocket {
  readonly readyState: number;
  send(data: string, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  ping(): void;
  on(event: 'message', listener: (data: RawData, isBinary: boolean) => void): unknown;
  on(event: 'close', listener: (code: number, reason: Buffer) => void): unknown;
  on(event: 'pong', listener: () => void): unknown;
}

/** WebSocket readyState OPEN */
export const OPEN = 1;

/** fields of the HTTP transport that a `response.create` message must not carry (Open Responses, 2026-04-24) */
export const HTTP_ONLY_FIELDS = ['stream', 'stream_options', 'background'] as const;

/** a JSON \\u0000 escape that is not itself escaped (the HTTP JSON parser refuses the same) */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

const validate = lazyValidatorCompiler({ schema: CreateResponseBody, httpPart: 'body', method: 'POST', url: '/v1/responses' }) as ((v: unknown) => boolean) & {
  errors?: Parameters<typeof describeValidationError>[0];
};

export function frameBytes(data: RawData): number {
  if (Array.isArray(data)) return data.reduce((n, b) => n + b.length, 0);
  return data instanceof ArrayBuffer ? data.byteLength : data.length;
}

function frameText(data: RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data as ArrayBuffer).toString('utf8');
}

/** A client message read: the request, or why it is refused (and the previous response it named, if it is readable). */
export interface ClientMessage {
  body?: CreateResponseRequest;
  error?: AppError;
  /** previous_response_id of the message, when it could be read (a failed continuation evicts it) */
  previous?: string;
}

const invalid = (message: string, param: string | null, detail: 'invalid_type' | 'invalid_value' | 'missing_required_parameter') =>
  new AppError('validation_error', message, param, { detail });

/**
 * Reads one client frame. Every refusal is an AppError (the frame's answer is an error frame; the connection
 * stays usable): binary frames, frames over `maxBytes`, text that is not JSON, a JSON value that is not a
 * `response.create` object, HTTP-only fields, and anything the create body's schema refuses.
 */
export function readClientFrame(data: RawData, isBinary: boolean, maxBytes: number): ClientMessage {
  const bytes = frameBytes(data);
  if (bytes > maxBytes) {
    return { error: new AppError('payload_too_large', `The message is ${bytes} bytes; a message may be at most ${maxBytes} bytes on this connection.`) };
  }
  if (isBinary) {
    return { error: new AppError('unsupported_media_type', 'Binary frames are not accepted: send each response.create message as a JSON text frame.') };
  }
  const text = frameText(data);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { error: new AppError('invalid_json', 'The message is not valid JSON: send a JSON object {"type": "response.create", "model": ..., "input": ...}.') };
  }
  const shape = checkJsonShape(v);
  if (shape) return { error: shapeError(shape) };
  if (!v || typeof v !== 'object' || Array.isArray(v)) {
    return {
      error: invalid(
        `The message must be a JSON object with "type": "response.create"; got ${v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v}.`,
        null,
        'invalid_type',
      ),
    };
  }
  const o = v as Record<string, unknown>;
  const previous = typeof o.previous_response_id === 'string' ? o.previous_response_id : undefined;
  const fail = (error: AppError): ClientMessage => ({ error, previous });
  if (o.type === undefined) return fail(invalid("Missing required parameter: 'type'. The only client event is 'response.create'.", 'type', 'missing_required_parameter'));
  if (o.type !== 'response.create') {
    const shown = typeof o.type === 'string' ? `'${o.type.slice(0, 60)}'` : JSON.stringify(o.type)?.slice(0, 60);
    return fail(invalid(`Invalid value for 'type': ${shown}. Supported values are: 'response.create'.`, 'type', 'invalid_value'));
  }
  if (NUL_ESCAPE.test(text)) return fail(new AppError('validation_error', 'the message must not contain NUL characters (\\u0000)'));
  for (const f of HTTP_ONLY_FIELDS) {
    if (f in o) {
      return fail(
        new AppError(
          'unsupported_parameter',
          `'${f}' is a field of the HTTP transport and is not sent in WebSocket mode: every response streams its events on the socket` +
            (f === 'background' ? '; background responses are created over HTTP.' : '.'),
          f,
        ),
      );
    }
  }
  if ('stream_id' in o) {
    // the 7.x SDK's lanes (several responses in flight on one connection); the Open Responses specification has one
    return fail(
      new AppError(
        'unsupported_parameter',
        "'stream_id' (lanes) is not supported: a connection runs one response at a time, in the order sent. Open more connections for parallel work.",
        'stream_id',
      ),
    );
  }
  const { type: _type, ...body } = o;
  void _type;
  const unsupported = notImplementedParameter(body);
  if (unsupported) return fail(unsupported);
  if (body.input === undefined) return fail(invalid("Missing required parameter: 'input'.", 'input', 'missing_required_parameter'));
  if (body.input === null) return fail(new AppError('validation_error', "'input' must be a string or an array, not null.", 'input'));
  if (!validate(body)) {
    const d = describeValidationError(validate.errors ?? undefined, 'body', body);
    return fail(new AppError('validation_error', d.message, d.param, { localized: { zh: d.zh }, detail: d.detail }));
  }
  return { body: body as CreateResponseRequest, previous };
}

/**
 * An error frame: the Open Responses envelope (`status`, `error: {type, code, message, param}`), and beside it the
 * flat `code`, `message`, `param` of the SSE `error` event (the official SDK's ResponseErrorEvent), so a client
 * reading either shape finds the code. Inside a response it carries the next `sequence_number`.
 */
export function errorFrame(e: AppError, acceptLanguage: string | undefined, sequence?: number) {
  const message = localizedMessage(e, acceptLanguage);
  const code = e.openaiCode;
  return {
    type: 'error',
    status: e.status,
    error: { type: ERRORS[e.code].type, code, message, param: e.param },
    code,
    message,
    param: e.param,
    ...(sequence !== undefined ? { sequence_number: sequence } : {}),
  };
}

/** The SSE `error` event a failing response emits (code, message, param), with the envelope added. */
export function withEnvelope(ev: { type: string; sequence_number: number; [k: string]: unknown }) {
  const code = typeof ev.code === 'string' ? ev.code : 'server_error';
  const known = code in ERRORS ? ERRORS[code as ErrorCode] : undefined;
  return {
    ...ev,
    status: known?.status ?? 500,
    error: { type: known?.type ?? 'server_error', code, message: ev.message, param: ev.param ?? null },
  };
}
