/**
 * The few hub requests the pull makes itself (the download is node-llama-cpp's): the repository's file list
 * (to pick a quantization, with each file's size and SHA-256) and one small ranged GET of the file (size,
 * checksum headers, commit, the first bytes to tell a GGUF from an HTML page before gigabytes are fetched).
 *
 * The token goes only to the hub's own address; redirects are followed by hand so it never reaches another host
 * from here.
 */
import { PullError } from './errors.js';

export interface Hub {
  /** e.g. https://huggingface.co (no trailing slash) */
  endpoint: string;
  token?: string;
  signal?: AbortSignal;
  /** per request (ms); default 60 s */
  timeoutMs?: number;
}

export interface RepoFile {
  path: string;
  size?: number;
  sha256?: string;
}

export interface RepoListing {
  /** the commit the listing is of */
  commit?: string;
  gated: boolean;
  files: RepoFile[];
}

export interface FileHead {
  /** total size in bytes, when the server says */
  size?: number;
  /** SHA-256 the hub announces (x-linked-etag of an LFS file), lower-case hex */
  sha256?: string;
  /** x-repo-commit */
  commit?: string;
  /** the first bytes of the file (up to 16) */
  head: Buffer;
}

const SHA256 = /^[0-9a-f]{64}$/;

function hubOrigin(hub: Hub): string {
  return new URL(hub.endpoint).origin;
}

function headersFor(hub: Hub, url: string, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': 'portico', ...extra };
  if (hub.token && new URL(url).origin === hubOrigin(hub)) h.authorization = `Bearer ${hub.token}`;
  return h;
}

function signalFor(hub: Hub): AbortSignal {
  const t = AbortSignal.timeout(hub.timeoutMs ?? 60_000);
  return hub.signal ? AbortSignal.any([hub.signal, t]) : t;
}

/** A printable form of a URL for messages: no query string (CDN links carry signatures). */
export function displayUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(bad URL)';
  }
}

function networkError(hub: Hub, url: string, e: unknown): PullError {
  if (hub.signal?.aborted) return new PullError('interrupted', 'stopped before the download began');
  const err = e as Error & { cause?: { code?: string; message?: string } };
  if (err?.name === 'TimeoutError') return new PullError('hub_error', `${new URL(url).host} did not answer within ${Math.round((hub.timeoutMs ?? 60_000) / 1000)} s`);
  const why = err?.cause?.code ?? err?.cause?.message ?? err?.message ?? String(e);
  return new PullError('hub_error', `cannot reach ${new URL(url).host}: ${why}.${offlineWays(hub, url)}`);
}

/**
 * What to do when the hub cannot be reached (no internet, a firewall): a mirror, a plain URL the network does reach,
 * or a file copied here and named in the model file. A plain URL that cannot be reached gets the last two.
 */
function offlineWays(hub: Hub, url: string): string {
  const fromHub = new URL(url).origin === new URL(hub.endpoint).origin;
  return (
    (fromHub ? ` Without access to ${new URL(hub.endpoint).host}: set PORTICO_HF_ENDPOINT (or HF_ENDPOINT) to a mirror of the hub;` : '') +
    ` pull the file from an https:// address this machine reaches; or copy the .gguf here and name it in the model file (PORTICO_CONFIG: provider llama, path: the file; docs/models.md).`
  );
}

/** Maps a hub refusal to a message that says what to do. `what` names the repository or file. */
export function statusError(hub: Hub, res: Response, what: string, repoPage?: string): PullError {
  const code = res.headers.get('x-error-code') ?? '';
  const host = new URL(res.url || hub.endpoint).host;
  const s = res.status;
  if (s === 401) {
    if (code === 'GatedRepo')
      return new PullError(
        'unauthorized',
        `${what} is gated: accept its conditions at ${repoPage ?? hub.endpoint} and set HF_TOKEN to a token of that account${hub.token ? ' (the HF_TOKEN given was refused)' : ''}`,
      );
    if (hub.token) return new PullError('unauthorized', `${host} refused HF_TOKEN for ${what} (401): check the token, and that its account may read this repository`);
    return new PullError(
      'unauthorized',
      `${host} wants a token for ${what} (401): it is gated or private, or does not exist. If it exists, set HF_TOKEN to a token that may read it`,
    );
  }
  if (s === 403) {
    return new PullError(
      'forbidden',
      `${host} refused access to ${what} (403)${code === 'GatedRepo' || !code ? `: if the repository is gated, accept its conditions at ${repoPage ?? hub.endpoint} with the account of HF_TOKEN` : ''}`,
    );
  }
  if (s === 404 || s === 410) {
    if (code === 'RevisionNotFound') return new PullError('not_found', `${what}: no such revision on ${host}`);
    if (code === 'EntryNotFound') return new PullError('not_found', `${what}: no such file on ${host}`);
    if (code === 'RepoNotFound') return new PullError('not_found', `${what}: no such repository on ${host}`);
    return new PullError('not_found', `${what} was not found on ${host} (${s})`);
  }
  if (s === 429) return new PullError('hub_error', `${host} is rate limiting requests (429); try again in a minute`);
  if (s === 416) return new PullError('hub_error', `${host} refused the byte range for ${what} (416)`);
  return new PullError('hub_error', `${host} answered ${s} ${res.statusText} for ${what}${s >= 500 ? '; try again later' : ''}`);
}

async function request(
  hub: Hub,
  url: string,
  init: { method: string; headers?: Record<string, string> },
  what: string,
  repoPage?: string,
): Promise<{ res: Response; hops: Response[] }> {
  const hops: Response[] = [];
  let current = url;
  for (let i = 0; i < 10; i++) {
    let res: Response;
    try {
      res = await fetch(current, { method: init.method, headers: headersFor(hub, current, init.headers), redirect: 'manual', signal: signalFor(hub) });
    } catch (e) {
      throw networkError(hub, current, e);
    }
    if (res.status >= 300 && res.status < 400 && res.headers.get('location')) {
      hops.push(res);
      await res.body?.cancel();
      current = new URL(res.headers.get('location')!, current).href;
      continue;
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw statusError(hub, res, what, repoPage);
    }
    return { res, hops };
  }
  throw new PullError('hub_error', `too many redirects for ${what}`);
}

export function repoPageUrl(hub: Hub, owner: string, repo: string): string {
  return `${hub.endpoint}/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}`;
}

export function resolveUrl(hub: Hub, owner: string, repo: string, revision: string, file: string): string {
  return `${hub.endpoint}/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
}

function parseSize(v: string | null): number | undefined {
  if (!v || !/^\d+$/.test(v.trim())) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

function parseSha(v: string | null | undefined): string | undefined {
  if (!v) return undefined;
  const s = v.trim().replace(/^W\//, '').replace(/^"|"$/g, '').toLowerCase();
  return SHA256.test(s) ? s : undefined;
}

/** The files of a repository at a revision, with sizes and LFS SHA-256 (GET /api/models/<repo>/revision/<rev>?blobs=true). */
export async function listRepoFiles(hub: Hub, owner: string, repo: string, revision: string): Promise<RepoListing> {
  const url = `${hub.endpoint}/api/models/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/revision/${encodeURIComponent(revision)}?blobs=true`;
  const what = `hf:${owner}/${repo}${revision !== 'main' ? `#${revision}` : ''}`;
  const { res } = await request(hub, url, { method: 'GET', headers: { accept: 'application/json' } }, what, repoPageUrl(hub, owner, repo));
  let body: any;
  try {
    body = await res.json();
  } catch {
    throw new PullError('hub_error', `${new URL(url).host} did not answer the model API with JSON for ${what}: is ${hub.endpoint} a Hugging Face hub?`);
  }
  if (!body || !Array.isArray(body.siblings)) throw new PullError('hub_error', `${new URL(url).host} answered the model API for ${what} without a file list`);
  const files: RepoFile[] = [];
  for (const s of body.siblings) {
    if (!s || typeof s.rfilename !== 'string') continue;
    const size = typeof s.lfs?.size === 'number' ? s.lfs.size : typeof s.size === 'number' ? s.size : undefined;
    files.push({ path: s.rfilename, size, sha256: parseSha(s.lfs?.sha256 ?? s.lfs?.oid) });
  }
  return { commit: typeof body.sha === 'string' && /^[0-9a-f]{40}$/.test(body.sha) ? body.sha : undefined, gated: !!body.gated, files };
}

/**
 * One ranged GET of the first bytes, following redirects by hand: the size (x-linked-size, Content-Range,
 * Content-Length), the SHA-256 the hub announces (x-linked-etag on its redirect), the commit, and the head bytes.
 */
export async function headOfFile(hub: Hub, url: string, what: string, repoPage?: string): Promise<FileHead> {
  const { res, hops } = await request(hub, url, { method: 'GET', headers: { range: 'bytes=0-15', 'accept-encoding': 'identity' } }, what, repoPage);
  const all = [...hops, res];
  const pick = (name: string) => all.map((r) => r.headers.get(name)).find((v) => v != null) ?? null;
  const linkedSize = parseSize(pick('x-linked-size'));
  const range = /\/(\d+)\s*$/.exec(res.headers.get('content-range') ?? '');
  const size = linkedSize ?? (range ? Number(range[1]) : res.status === 200 ? parseSize(res.headers.get('content-length')) : undefined);
  const sha256 = parseSha(pick('x-linked-etag'));
  const commit = pick('x-repo-commit') ?? undefined;
  const chunks: Buffer[] = [];
  let got = 0;
  const reader = res.body?.getReader();
  try {
    while (reader && got < 16) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(Buffer.from(value));
      got += value.length;
    }
  } catch (e) {
    throw networkError(hub, url, e);
  } finally {
    await reader?.cancel().catch(() => {});
  }
  return { size, sha256, commit: commit && /^[0-9a-f]{40}$/.test(commit) ? commit : undefined, head: Buffer.concat(chunks).subarray(0, 16) };
}

/**
 * A small file of a repository, whole (a piper voice's .onnx.json: a few kB), following redirects by hand as the
 * other requests do. Refused past `maxBytes`.
 */
export async function fetchSmallFile(hub: Hub, url: string, what: string, maxBytes = 1 << 20, repoPage?: string): Promise<Buffer> {
  const { res } = await request(hub, url, { method: 'GET', headers: { 'accept-encoding': 'identity' } }, what, repoPage);
  const chunks: Buffer[] = [];
  let got = 0;
  const reader = res.body?.getReader();
  try {
    while (reader) {
      const { done, value } = await reader.read();
      if (done) break;
      got += value.length;
      if (got > maxBytes) throw new PullError('not_a_model', `${what} is larger than ${maxBytes} bytes: not the small file it should be`);
      chunks.push(Buffer.from(value));
    }
  } catch (e) {
    if (e instanceof PullError) throw e;
    throw networkError(hub, url, e);
  } finally {
    await reader?.cancel().catch(() => {});
  }
  return Buffer.concat(chunks);
}
