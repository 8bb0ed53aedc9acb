/**
 * The download itself is node-llama-cpp's `createModelDownloader` (ipull underneath: parallel ranged
 * connections, redirects, retries of cut connections, and resume: the partial file `<name>.ipull` carries its
 * progress at its end, so a later run fetches only the missing 5 MB chunks). This file is the glue: where the
 * file goes, which token goes to which host, what an abort and a failure mean.
 */
import { open, stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { PullError } from './errors.js';

export interface DownloadOptions {
  url: string;
  /** the staging folder (MODELS_DIR/.partial/...) */
  dir: string;
  fileName: string;
  /** the hub's address: the token is offered to it (and the host it redirects to), to no other */
  hubEndpoint: string;
  token?: string;
  signal?: AbortSignal;
  onProgress?: (downloaded: number, total: number) => void;
  /** a transfer that receives nothing for this long is cut and resumed (default 60 s: PORTICO_PULL_STALL_MS) */
  stallMs?: number;
  /** how many times a stalled transfer is resumed before the pull gives up (default 3) */
  stallRetries?: number;
  /** told when a stalled transfer is cut and resumed */
  onStall?: (info: { downloaded: number; total: number; stalledMs: number; attempt: number; attempts: number }) => void;
}

export const DEFAULT_STALL_MS = 60_000;
export const DEFAULT_STALL_RETRIES = 3;

/** Errors of the local disk that no retry fixes. */
const DISK_ERRORS = new Set(['ENOSPC', 'EDQUOT', 'EFBIG', 'EROFS', 'EACCES', 'EPERM', 'EIO']);

export function diskError(e: unknown): PullError | undefined {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (!code || !DISK_ERRORS.has(code)) return undefined;
  if (code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG')
    return new PullError('disk_full', `the disk is full (${code}) while writing the model; free some space (or point MODELS_DIR at a larger disk) and pull again`);
  return new PullError('disk_error', `cannot write the model (${code}: ${(e as Error).message})`);
}

/**
 * Waits until nothing writes to the file any more (size and mtime unchanged for `quietMs`). ipull's close does not
 * wait for the writes and the progress record already under way: they may land (and even create the partial
 * file) after the download has returned. Before the lock is released or the file is checked, they must be done.
 */
export async function settle(path: string, quietMs = 150, maxMs = 5000): Promise<void> {
  const sig = async () => {
    try {
      const s = await stat(path);
      return `${s.size}:${s.mtimeMs}`;
    } catch {
      return 'absent';
    }
  };
  const end = Date.now() + maxMs;
  let last = await sig();
  let since = Date.now();
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 25));
    const now = await sig();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return;
  }
}

/** What a partial file of an interrupted run holds that a resume keeps. */
export interface PartialProgress {
  /** bytes complete from the start of the file, with no gap: where the transfer goes on from */
  contiguous: number;
  /** every byte complete (further complete chunks too, which a resume does not fetch again) */
  kept: number;
}

const NOTHING: PartialProgress = { contiguous: 0, kept: 0 };
/** ipull's chunk states (its ChunkStatus) */
const CHUNK_COMPLETE = 2;

/**
 * What the partial file `<fileName>.ipull` of an interrupted run holds, read as ipull reads it when it resumes. The
 * file's size says nothing: its bytes are written at their offsets by several ranged transfers at once (the file is
 * as long as the furthest write, with holes before it), and once a chunk is complete ipull records its progress as
 * JSON after the file's full size (`totalSize`), so the partial file is then longer than the model itself. The
 * record lists which chunks are complete (`{part, chunks: [0 not started | 1 in progress | 2 complete], chunkSize}`);
 * chunks not complete are fetched again from their start, whatever of them was written. A file without a readable
 * record is started again from 0 by ipull, and counts nothing here either. `totalSize`: the size the hub announces
 * (without it ipull cannot resume, and nothing counts).
 */
export async function partialProgress(dir: string, fileName: string, totalSize: number | undefined): Promise<PartialProgress> {
  if (!totalSize || totalSize <= 0) return NOTHING;
  let fh;
  try {
    fh = await open(join(dir, `${fileName}.ipull`), 'r');
  } catch {
    return NOTHING;
  }
  try {
    const { size } = await fh.stat();
    const recordLength = size - totalSize;
    // no record yet (nothing complete), or an implausible one (a record lists a few bytes per 5 MB chunk)
    if (recordLength <= 0 || recordLength > 1_000_000 + totalSize / 1000) return NOTHING;
    const b = Buffer.alloc(recordLength);
    const { bytesRead } = await fh.read(b, 0, recordLength, totalSize);
    let record: { part?: unknown; chunks?: unknown; chunkSize?: unknown };
    try {
      record = JSON.parse(b.subarray(0, bytesRead).toString('utf8'));
    } catch {
      return NOTHING;
    }
    const { part, chunks, chunkSize } = record ?? {};
    // a single-file model: one part; the chunks must cover the file exactly
    if (part !== 0 || !Array.isArray(chunks) || typeof chunkSize !== 'number' || !Number.isInteger(chunkSize) || chunkSize <= 0) return NOTHING;
    if (chunks.length !== Math.ceil(totalSize / chunkSize)) return NOTHING;
    const bytesOf = (i: number) => Math.min(chunkSize, totalSize - i * chunkSize);
    let contiguous = 0;
    let kept = 0;
    let gap = false;
    chunks.forEach((c, i) => {
      if (c !== CHUNK_COMPLETE) {
        gap = true;
        return;
      }
      kept += bytesOf(i);
      if (!gap) contiguous += bytesOf(i);
    });
    return { contiguous, kept };
  } finally {
    await fh.close();
  }
}

/**
 * Downloads into `dir/fileName` and returns its path. A completed file is not checked here (pull.ts verifies);
 * on abort or a network failure the partial file stays for the next run (PullError 'interrupted', resumable).
 */
export async function downloadModelFile(o: DownloadOptions): Promise<string> {
  return downloadWithWatchdog(o, o.stallMs ?? DEFAULT_STALL_MS);
}

/** the pulls running in this process: each one's stall wait and the signal that stops its attempt */
const pulls = new Map<symbol, { ms: number; signal: AbortSignal }>();
let unboundFetch: typeof fetch | undefined;

/**
 * The downloader hooks its abort to a request only once the answer's headers came, and retries a failed request up
 * to 150 times: a server that takes the request and never answers would hold the pull past any signal. While a
 * pull runs, the global fetch (which the downloader calls) gives up on headers that do not come within the stall
 * wait (an error: the downloader retries), and once the pull's attempt is stopped it fails at once with an
 * AbortError (the downloader's transfer then ends). Given back as it was when the last pull ends.
 */
function boundFetch(ms: number, signal: AbortSignal): () => void {
  const mine = Symbol('pull');
  pulls.set(mine, { ms, signal });
  if (!unboundFetch) {
    const plain = (unboundFetch = globalThis.fetch);
    const bounded = async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
      if (pulls.size === 0) return plain(input, init);
      const wait = Math.min(...[...pulls.values()].map((p) => p.ms));
      const noHeaders = new AbortController();
      const timer = setTimeout(() => noHeaders.abort(new Error(`no answer within ${Math.round(wait / 1000)} s`)), wait);
      const signals = [noHeaders.signal, ...[...pulls.values()].map((p) => p.signal), ...(init?.signal ? [init.signal] : [])];
      try {
        return await plain(input, { ...init, signal: AbortSignal.any(signals) });
      } finally {
        clearTimeout(timer); // the headers came (or the request failed): the body is the stall watchdog's
      }
    };
    globalThis.fetch = bounded as typeof fetch;
  }
  return () => {
    pulls.delete(mine);
    if (pulls.size === 0 && unboundFetch) {
      globalThis.fetch = unboundFetch;
      unboundFetch = undefined;
    }
  };
}

async function downloadWithWatchdog(o: DownloadOptions, stallMs: number): Promise<string> {
  const attempts = 1 + (o.stallRetries ?? DEFAULT_STALL_RETRIES);
  for (let attempt = 1; ; attempt++) {
    // a watchdog on the bytes: ipull retries a cut connection, but one that stays open and sends nothing would
    // hold the pull forever ("72% ... 0 B/s" for minutes); cut it, and resume from what is on disk
    const stall = new AbortController();
    let downloaded = 0;
    let total = 0;
    let lastChange = Date.now();
    const watch = setInterval(
      () => {
        if (Date.now() - lastChange >= stallMs) stall.abort();
      },
      Math.max(10, Math.min(1000, stallMs / 4)),
    );
    watch.unref();
    const signal = o.signal ? AbortSignal.any([o.signal, stall.signal]) : stall.signal;
    const releaseFetch = boundFetch(stallMs, signal);
    try {
      return await downloadOnce({
        ...o,
        signal,
        onProgress: (d, t) => {
          if (d !== downloaded) lastChange = Date.now();
          downloaded = d;
          total = t;
          o.onProgress?.(d, t);
        },
      });
    } catch (e) {
      if (!stall.signal.aborted || o.signal?.aborted) throw e;
    } finally {
      clearInterval(watch);
      releaseFetch();
    }
    const stalledMs = Date.now() - lastChange;
    if (attempt >= attempts)
      throw new PullError(
        'interrupted',
        `the transfer stalled: nothing arrived for ${Math.round(stallMs / 1000)} s, ${attempts} times; the part downloaded so far is kept: run the same command again to resume (PORTICO_PULL_STALL_MS sets the wait)`,
        true,
      );
    o.onStall?.({ downloaded, total, stalledMs, attempt: attempt + 1, attempts });
  }
}

async function downloadOnce(o: DownloadOptions): Promise<string> {
  const { createModelDownloader } = await import('node-llama-cpp');
  if (o.signal?.aborted) throw new PullError('interrupted', 'stopped before the download began', true);
  // ipull lets a failed disk write escape as an unhandled rejection besides failing the download (its write
  // promises are chained without a handler); while the download runs, such a rejection is noted as the cause
  // instead of killing the process. Anything else keeps Node's default: it is thrown.
  let diskFailure: PullError | undefined;
  const onUnhandled = (reason: unknown) => {
    const d = diskError(reason);
    if (d) diskFailure ??= d;
    else if (process.listenerCount('unhandledRejection') === 1) throw reason; // nobody else listens: Node's default
  };
  process.on('unhandledRejection', onUnhandled);
  let path: string;
  let total = 0;
  const partial = join(o.dir, `${o.fileName}.ipull`);
  try {
    const downloader = await createModelDownloader({
      modelUri: o.url,
      dirPath: o.dir,
      fileName: o.fileName,
      // a kept partial file is how a later run resumes
      deleteTempFileOnCancel: false,
      skipExisting: true,
      // given explicitly, so node-llama-cpp does not read HF_TOKEN or the token file behind our back (its code
      // takes null as "no token", though its types say string); it offers the token only to URLs on the hub's host
      tokens: { huggingFace: (o.token ?? null) as string | undefined },
      endpoints: { huggingFace: o.hubEndpoint.replace(/\/?$/, '/') },
      onProgress: o.onProgress ? (s) => o.onProgress!(s.downloadedSize, s.totalSize) : undefined,
    });
    if (downloader.totalFiles !== 1) {
      await downloader.cancel({ deleteTempFile: true });
      throw new PullError('split_unsupported', `${o.fileName} comes in ${downloader.totalFiles} parts; pull takes single-file models`);
    }
    path = await downloader.download({ signal: o.signal });
    total = downloader.totalSize;
  } catch (e) {
    await settle(partial);
    if (e instanceof PullError) throw e;
    throw translate(e, o, diskFailure);
  } finally {
    // a rejection raised in the same turn as the failure is delivered after it: keep listening one more turn
    setImmediate(() => process.off('unhandledRejection', onUnhandled));
  }
  await settle(o.signal?.aborted ? partial : path);
  if (diskFailure) throw diskFailure;
  // node-llama-cpp returns normally when the signal stopped it
  if (o.signal?.aborted) throw new PullError('interrupted', 'stopped; the part downloaded so far is kept: run the same command again to resume', true);
  let size: number;
  try {
    size = (await stat(path)).size;
  } catch {
    throw new PullError('interrupted', 'the download ended without its file; run the same command again to resume', true);
  }
  // ipull may append its progress record once more after it has cut the file to size (a write already under
  // way when the download finished): the bytes past the announced size are that record, not the model
  if (total > 0 && size > total) await truncate(path, total);
  return path;
}

function translate(e: unknown, o: DownloadOptions, diskFailure: PullError | undefined): PullError {
  if (diskFailure) return diskFailure;
  const d = diskError(e);
  if (d) return d;
  if (o.signal?.aborted) return new PullError('interrupted', 'stopped; the part downloaded so far is kept: run the same command again to resume', true);
  const status = (e as { statusCode?: number })?.statusCode;
  const host = new URL(o.url).host;
  if (status === 401 || status === 403)
    return new PullError(
      status === 401 ? 'unauthorized' : 'forbidden',
      `${host} refused the download (${status})${o.token ? '' : ': set HF_TOKEN if the repository is gated or private'}`,
    );
  if (status === 404) return new PullError('not_found', `${host} no longer has the file (404)`);
  if (status) return new PullError('interrupted', `${host} answered ${status} during the download; the part downloaded so far is kept: run the same command again to resume`, true);
  const msg = (e as Error)?.message ?? String(e);
  return new PullError('interrupted', `the download failed (${msg}); the part downloaded so far is kept: run the same command again to resume`, true);
}
