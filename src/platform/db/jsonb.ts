/**
 * jsonb values for SQL: the JSON text of a small value as a string parameter (as always), a large one as the
 * UTF-8 bytes of its text made in slices (platform/json-text.ts), so storing the input items of the largest
 * accepted request (16 MiB) never holds the event loop for JSON.stringify of the whole, nor for copying a 16 MiB
 * string to the database's thread. How the bytes reach the database depends on the driver:
 * - PostgreSQL (node-postgres): `toPostgres` gives jsonb's binary format, a version byte (1) and the text, which
 *   the server reads as it reads the text format (the parameter is typed by its `::jsonb` cast);
 * - PGlite on its thread (pglite-client.ts): the bytes are moved to the thread (no copy) and made text there;
 * - PGlite on this thread (PORTICO_PGLITE_THREAD=off): made text here.
 */
import { sql, type RawBuilder } from 'kysely';
import { jsonUtf8, largeJson, type JsonBytes, type JsonReplacer } from '../json-text.js';

/** jsonb's binary format: this version byte, then the text */
const JSONB_V1 = 1;

/** A jsonb parameter given as the UTF-8 bytes of its JSON text (see the file's comment). */
export class JsonbText {
  constructor(readonly json: JsonBytes) {}

  /** node-postgres sends a Buffer as a binary parameter: jsonb's binary format (the version byte is the headroom) */
  toPostgres(): Buffer {
    return this.json.buffer;
  }
}

/**
 * `value` as a jsonb SQL value, the same as sql`${JSON.stringify(value, replacer)}::jsonb`: a small value at
 * once, a large one (past platform/json-text.ts's LARGE_JSON_CHARS) once its bytes are made, with turns of the
 * event loop between slices. Make it before a transaction begins: on PGlite a transaction holds the one
 * connection while it waits.
 */
export function jsonb(value: unknown, replacer?: JsonReplacer): RawBuilder<unknown> | Promise<RawBuilder<unknown>> {
  const v = jsonbSized(value, replacer);
  return v instanceof Promise ? v.then((s) => s.sql) : v.sql;
}

/** a jsonb SQL value and the UTF-8 bytes of its JSON text */
export interface SizedJsonb {
  sql: RawBuilder<unknown>;
  bytes: number;
}

/** jsonb(), with the size of the text it sends (what was stored: a caller keeps it beside the value) */
export function jsonbSized(value: unknown, replacer?: JsonReplacer): SizedJsonb | Promise<SizedJsonb> {
  if (!largeJson(value)) {
    const text = JSON.stringify(value, replacer);
    return { sql: sql`${text}::jsonb`, bytes: text === undefined ? 0 : Buffer.byteLength(text) };
  }
  return jsonUtf8(value, replacer, 1).then((bytes) => {
    if (!bytes) return { sql: sql`${undefined}::jsonb`, bytes: 0 };
    bytes.buffer[0] = JSONB_V1;
    return { sql: sql`${new JsonbText(bytes)}::jsonb`, bytes: bytes.byteLength };
  });
}
