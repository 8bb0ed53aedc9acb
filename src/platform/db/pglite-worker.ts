/**
 * The embedded database's thread. PGlite is PostgreSQL compiled to WebAssembly: every query runs its WASM
 * synchronously on the thread that owns it, so on the main thread a slow statement (a ledger query, a
 * checkpoint, a migration) would hold up every request in flight. Here it runs on a worker thread of its own
 * and the main thread only sends SQL and receives rows over the worker's MessagePort (pglite-client.ts).
 *
 * Protocol (structured clone): in `{ id, sql, params, before? }` (`before`: a transaction's begin, run first), out `{ id, rows, affectedRows, json? }`
 * (`json`: the columns whose values are JSON text, parsed on the receiving side) or
 * `{ id, error: { message, name, code, ... } }`; `{ dump: true }` answers `{ dumped: bytes }` (the data directory as a tar file); the rows of a large result come apart on the batch port (`{ id, rows: [],
 * parts }`, ../batches.ts) and a large jsonb parameter as the bytes of its text (pglite-message.ts); `{ close: true }` closes the database and ends the thread.
 * The first message in is `{ open: WorkerOptions }` (the WebAssembly compiles before it comes, unless workerData
 * brings it compiled); out comes `{ ready: true }` once the database is open, or `{ failed: {...} }`, and, from a
 * thread that compiled the WebAssembly, `{ compiled: WebAssembly.Module }` for the next threads.
 */
import { openAsBlob, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { JSONB_TEXT_KEY } from './pglite-message.js';
import { BATCH_CHARS, heavy, sendInBatches } from '../batches.js';
import { largeWorkDone } from '../reclaim.js';

export interface WorkerOptions {
  dir?: string;
  postgresqlconf: string[];
  initialMemory?: number;
  /** a new database starts as a copy of this dump of a data directory (a tar file, made by `dump`) instead of initdb */
  template?: string;
}

const INT8 = 20;
const NUMERIC = 1700;
const JSON_OID = 114;
const JSONB = 3802;
const toNumber = (v: string) => (v === null ? null : Number(v));
const asText = (v: string) => v;

/** The fields of a database error worth carrying across (PGlite's DatabaseError: code, detail, constraint...). */
export function serializeError(e: unknown): Record<string, unknown> {
  if (!(e instanceof Error)) return { message: String(e), name: 'Error' };
  const out: Record<string, unknown> = { message: e.message, name: e.name };
  for (const [k, v] of Object.entries(e)) {
    if (k === 'message' || k === 'name') continue;
    if (v === null || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') out[k] = v;
  }
  return out;
}

/**
 * PGlite's 9 MB of WebAssembly, compiled as soon as the thread starts, before it is told which database to open:
 * `serve` starts the thread first thing (PGliteWorkerClient.prestart), so this runs while the main thread loads
 * its modules. Compiled by the baseline compiler only (Liftoff): V8's optimizing tier adds 40-65 MiB of code and
 * start-up CPU for no measurable gain on Portico's short statements (docs/performance.md, "Start-up and
 * memory"). V8 flags are per process: set for this compilation only and restored, so other WebAssembly (the
 * speech engines) keeps the optimizing tier.
 */
function compilePGlite(): Promise<WebAssembly.Module> {
  setFlagsFromString('--liftoff-only');
  const wasm = join(dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite')), 'pglite.wasm');
  const compiled = WebAssembly.compile(readFileSync(wasm));
  const restore = () => setFlagsFromString('--no-liftoff-only');
  compiled.then(restore, restore);
  return compiled;
}

const utf8 = new TextDecoder();
/** where the rows of large results go (pglite-client.ts reads them) */
const batchPort = (workerData as { batches?: MessagePort } | undefined)?.batches;
/** PGlite's WebAssembly as an earlier thread of this process compiled it (pglite-client.ts), if one did */
const givenWasm = (workerData as { wasm?: WebAssembly.Module } | undefined)?.wasm;

/** a large jsonb value comes as the bytes of its text, moved here from the main thread (pglite-client.ts): its text */
function textParams(params: unknown[]): any[] {
  if (!params.some((p) => p !== null && typeof p === 'object' && JSONB_TEXT_KEY in p)) return params;
  return params.map((p) => (p !== null && typeof p === 'object' && JSONB_TEXT_KEY in p ? utf8.decode((p as Record<string, Uint8Array>)[JSONB_TEXT_KEY]) : p));
}

async function main() {
  const port = parentPort!;
  const compiled = givenWasm ? Promise.resolve(givenWasm) : compilePGlite();
  // compiled here: sent back for the process's later threads to use as it is (a module crosses threads within a
  // process without being compiled again), an error is reported when the database is opened
  if (!givenWasm)
    compiled.then(
      (wasm) => port.postMessage({ compiled: wasm }),
      () => {},
    );
  const opts = await new Promise<WorkerOptions>((resolve) => port.once('message', (m: { open: WorkerOptions }) => resolve(m.open)));
  let db: PGlite;
  try {
    db = await PGlite.create(opts.dir, {
      // json and jsonb stay text here and are parsed by the thread that uses them (pglite-client.ts): a large
      // result is then held here once, as the strings of its rows, instead of also as the parsed values, and it
      // crosses to the main thread as flat strings (issue 22, docs/performance.md "Large requests and the
      // embedded database's memory")
      parsers: { [INT8]: toNumber, [NUMERIC]: toNumber, [JSON_OID]: asText, [JSONB]: asText } as any,
      postgresqlconf: opts.postgresqlconf,
      pgliteWasmModule: await compiled,
      ...(opts.initialMemory ? { initialMemory: opts.initialMemory } : {}),
      // a Blob of the file itself: PGlite reads it once, instead of the file read into a buffer and copied into a
      // Blob first (the test suite's template is ~40 MB, loaded by every test app)
      ...(opts.template ? { loadDataDir: await openAsBlob(opts.template) } : {}),
    });
  } catch (e) {
    port.postMessage({ failed: serializeError(e) });
    return;
  }
  port.on('message', (m: { id: number; sql: string; params: unknown[]; before?: string } | { close: true } | { dump: true }) => {
    if ('dump' in m) {
      // the data directory as a tar file: the template later databases start from (pglite-client.ts dump())
      db.dumpDataDir('none').then(
        async (file) => {
          const bytes = new Uint8Array(await file.arrayBuffer());
          port.postMessage({ dumped: bytes }, [bytes.buffer]);
        },
        (e) => port.postMessage({ dumped: null, error: serializeError(e) }),
      );
      return;
    }
    if ('close' in m) {
      db.close().then(
        () => port.postMessage({ closed: true }),
        (e) => port.postMessage({ closed: true, error: serializeError(e) }),
      );
      return;
    }
    const params = textParams(m.params);
    (m.before ? db.query(m.before).then(() => db.query(m.sql, params)) : db.query(m.sql, params)).then(
      (r) => {
        // the columns whose values are JSON text, for the main thread to parse
        const json = r.fields.filter((f) => f.dataTypeID === JSONB || f.dataTypeID === JSON_OID).map((f) => f.name);
        const jsonOut = json.length ? { json } : {};
        // a large result (a stored response's 4096 items) goes in batches the main thread reads one per turn
        if (batchPort && r.rows.length > 1 && heavy(r.rows)) {
          const parts = sendInBatches(batchPort, m.id, 'rows', r.rows);
          port.postMessage({ id: m.id, rows: [], parts, affectedRows: r.affectedRows, ...jsonOut });
          largeWorkDone(parts * BATCH_CHARS);
        } else port.postMessage({ id: m.id, rows: r.rows, affectedRows: r.affectedRows, ...jsonOut });
      },
      (e) => port.postMessage({ id: m.id, error: serializeError(e) }),
    );
  });
  port.postMessage({ ready: true });
}

void main();
