/**
 * A local HTTP server that answers like the Hugging Face hub, on the URL paths Portico and node-llama-cpp use:
 *
 *   GET  /api/models/<owner>/<repo>/revision/<rev>?blobs=true   model info: commit, gated, siblings with lfs sha256/size
 *   GET|HEAD /<owner>/<repo>/resolve/<rev>/<path>                LFS files: 302 to /cdn/<sha256>?... with x-linked-etag,
 *                                                                x-linked-size, x-repo-commit, ETag; small files: 200
 *   GET|HEAD /cdn/<sha256>                                       the bytes: Range (206 + Content-Range), Accept-Ranges,
 *                                                                Content-Length, ETag
 *   GET|HEAD /files/static/<name>                                plain files (no checksum headers), for URL references
 *
 * Private repositories answer 401 without a valid token (as the hub does, also for repositories that do not
 * exist); gated ones list their files to anyone but serve them only with a token that was granted access (401
 * without a token, 403 with a token of an account that did not accept the conditions). Faults for tests: cut a
 * transfer once after N bytes, stall ranged transfers, give nothing past an offset, corrupt a byte while announcing
 * the right checksum.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface FakeHubFile {
  path: string;
  data: Buffer;
  /** stored in LFS (302 to the CDN, sha256 announced); default: true for .gguf/.bin files */
  lfs?: boolean;
  /** what the hub announces instead of the real SHA-256 (a corrupted mirror), or null for none */
  announceSha256?: string | null;
  /** what the hub announces instead of the real size */
  announceSize?: number;
}

export interface FakeHubRepo {
  owner: string;
  repo: string;
  files: FakeHubFile[];
  private?: boolean;
  gated?: boolean;
  /** tokens of accounts that accepted a gated repository's conditions (default: every valid token) */
  grantedTokens?: string[];
  commit?: string;
}

export interface HubRequest {
  method: string;
  path: string;
  range?: string;
  /** the Authorization header value, as received */
  authorization?: string;
  /** bytes of body sent */
  sent: number;
  status: number;
}

export interface HubFaults {
  /** cut the next ranged transfer that would send more than this many bytes, after sending them (once) */
  cutAfterBytes?: number;
  /** ranged /cdn requests for which this returns true send 1000 bytes and then hang until the hub closes */
  stall?: (start: number) => boolean;
  /**
   * ranged /cdn requests send the file's bytes before this offset only: a range reaching past it sends what it has
   * below it, then hangs until the hub closes (a transfer that dies at that point of the file, every time)
   */
  onlyBelow?: number;
  /** ranged /cdn requests for which this returns true are read and never answered: no status, no headers */
  noAnswer?: (start: number) => boolean;
}

export class FakeHub {
  readonly requests: HubRequest[] = [];
  readonly faults: HubFaults = {};
  private readonly repos = new Map<string, FakeHubRepo & { commit: string }>();
  private readonly blobs = new Map<string, Buffer>();
  private readonly statics = new Map<string, { data: Buffer; headers: Record<string, string> }>();
  private readonly sockets = new Set<Socket>();
  private server!: Server;
  url = '';

  /** `host`: the name to listen on and to put in `url` (another name than the hub's is another host to the client) */
  constructor(
    readonly validTokens: string[] = [],
    readonly host = '127.0.0.1',
  ) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((r) => this.server.listen(0, this.host, r));
    this.url = `http://${this.host}:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  addRepo(r: FakeHubRepo): FakeHubRepo & { commit: string } {
    const repo = { ...r, commit: r.commit ?? randomBytes(20).toString('hex') };
    this.repos.set(`${r.owner}/${r.repo}`, repo);
    for (const f of r.files) this.blobs.set(sha256(f.data), f.data);
    return repo;
  }

  /** Serves bytes at /files/static/<name> (a plain URL) with extra headers. */
  addStatic(name: string, data: Buffer, headers: Record<string, string> = {}): string {
    this.statics.set(name, { data, headers });
    return `${this.url}/files/static/${name}`;
  }

  /** Requests whose path starts with this prefix. */
  requestsTo(prefix: string): HubRequest[] {
    return this.requests.filter((r) => r.path.startsWith(prefix));
  }

  /**
   * How many distinct bytes of the file at `path` the ranged requests among `requests` sent (a byte sent twice, by a
   * range asked again, counts once): what the client received of it.
   */
  distinctBytesSent(path: string, requests: HubRequest[] = this.requests): number {
    const spans = requests
      .filter((q) => q.path === path && q.range)
      .map((q): [number, number] => {
        const start = Number(/^bytes=(\d+)-/.exec(q.range!)?.[1] ?? 0);
        return [start, start + q.sent];
      })
      .sort((x, y) => x[0] - y[0]);
    let total = 0;
    let reach = 0;
    for (const [a, b] of spans) {
      total += Math.max(0, b - Math.max(a, reach));
      reach = Math.max(reach, b);
    }
    return total;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const u = new URL(req.url ?? '/', 'http://hub');
    const rec: HubRequest = { method: req.method ?? 'GET', path: u.pathname, range: req.headers.range, authorization: req.headers.authorization, sent: 0, status: 0 };
    this.requests.push(rec);
    const send = (status: number, body: string | Buffer = '', headers: Record<string, string> = {}): void => {
      rec.status = status;
      const b = typeof body === 'string' ? Buffer.from(body) : body;
      res.writeHead(status, { 'content-length': String(b.length), ...headers });
      if (req.method === 'HEAD') return void res.end();
      rec.sent += b.length;
      res.end(b);
    };
    const auth = req.headers.authorization?.replace(/^Bearer\s+/i, '');
    const validToken = auth !== undefined && this.validTokens.includes(auth);
    if (auth !== undefined && !validToken) return send(401, JSON.stringify({ error: 'Invalid credentials in Authorization header' }), { 'content-type': 'application/json' });

    const parts = u.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (parts[0] === 'cdn' && parts.length === 2) return this.serveBytes(req, res, rec, this.blobs.get(parts[1]));
    if (parts[0] === 'files' && parts[1] === 'static' && parts.length === 3) {
      const s = this.statics.get(parts[2]);
      return this.serveBytes(req, res, rec, s?.data, s?.headers);
    }

    const apiRepo = parts[0] === 'api' && parts[1] === 'models';
    const [owner, name] = apiRepo ? [parts[2], parts[3]] : [parts[0], parts[1]];
    const repo = this.repos.get(`${owner}/${name}`);
    if (!repo || (repo.private && !validToken)) {
      const body = JSON.stringify({ error: 'Repository not found' });
      return send(validToken ? 404 : 401, body, { 'content-type': 'application/json', 'x-error-code': 'RepoNotFound' });
    }
    if (apiRepo && parts[4] === 'revision' && parts.length === 6) {
      if (parts[5] !== 'main' && parts[5] !== repo.commit) return send(404, JSON.stringify({ error: 'Invalid rev id' }), { 'x-error-code': 'RevisionNotFound' });
      const siblings = repo.files.map((f) => {
        const lfs = f.lfs ?? /\.(gguf|bin)$/.test(f.path);
        return {
          rfilename: f.path,
          blobId: createHash('sha1').update(f.data).digest('hex'),
          size: f.announceSize ?? f.data.length,
          ...(lfs ? { lfs: { sha256: f.announceSha256 === undefined ? sha256(f.data) : f.announceSha256, size: f.announceSize ?? f.data.length, pointerSize: 134 } } : {}),
        };
      });
      return send(
        200,
        JSON.stringify({ _id: repo.commit.slice(0, 24), id: `${owner}/${name}`, sha: repo.commit, private: !!repo.private, gated: repo.gated ? 'manual' : false, siblings }),
        { 'content-type': 'application/json' },
      );
    }
    if (!apiRepo && parts[2] === 'resolve' && parts.length >= 5) {
      const rev = parts[3];
      if (rev !== 'main' && rev !== repo.commit) return send(404, 'Invalid rev id', { 'x-error-code': 'RevisionNotFound' });
      if (repo.gated) {
        if (!validToken) return send(401, 'Access to this model is restricted. You must have access to it and be authenticated to access it.', { 'x-error-code': 'GatedRepo' });
        if (repo.grantedTokens && !repo.grantedTokens.includes(auth!))
          return send(403, 'Access to this model is restricted and you are not in the authorized list.', { 'x-error-code': 'GatedRepo' });
      }
      const path = parts.slice(4).join('/');
      const f = repo.files.find((x) => x.path === path);
      if (!f) return send(404, 'Entry not found', { 'x-error-code': 'EntryNotFound' });
      const lfs = f.lfs ?? /\.(gguf|bin)$/.test(f.path);
      const sha = sha256(f.data);
      if (!lfs) return this.serveBytes(req, res, rec, f.data, { 'x-repo-commit': repo.commit, etag: `"${createHash('sha1').update(f.data).digest('hex')}"` });
      const announced = f.announceSha256 === undefined ? sha : f.announceSha256;
      const headers: Record<string, string> = {
        location: `/cdn/${sha}?X-Amz-Signature=${randomBytes(8).toString('hex')}&Expires=9999999999`,
        'x-repo-commit': repo.commit,
        'x-linked-size': String(f.announceSize ?? f.data.length),
      };
      if (announced) {
        headers['x-linked-etag'] = `"${announced}"`;
        headers.etag = `"${announced}"`;
      }
      return send(302, '', headers);
    }
    send(404, 'Not Found');
  }

  private serveBytes(req: IncomingMessage, res: ServerResponse, rec: HubRequest, data: Buffer | undefined, extra: Record<string, string> = {}): void {
    if (!data) {
      rec.status = 404;
      res.writeHead(404, { 'content-length': '9' });
      res.end(req.method === 'HEAD' ? undefined : 'Not Found');
      return;
    }
    let start = 0;
    let end = data.length - 1;
    let status = 200;
    const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    if (m) {
      start = Number(m[1]);
      end = m[2] ? Math.min(Number(m[2]), data.length - 1) : data.length - 1;
      if (start >= data.length || start > end) {
        rec.status = 416;
        res.writeHead(416, { 'content-range': `bytes */${data.length}`, 'content-length': '0' });
        res.end();
        return;
      }
      status = 206;
    }
    if (m && this.faults.noAnswer?.(start)) return; // hangs until the hub closes
    const body = data.subarray(start, end + 1);
    const headers: Record<string, string> = { 'accept-ranges': 'bytes', 'content-length': String(body.length), 'content-type': 'application/octet-stream', ...extra };
    if (status === 206) headers['content-range'] = `bytes ${start}-${end}/${data.length}`;
    rec.status = status;
    res.writeHead(status, headers);
    if (req.method === 'HEAD') return void res.end();
    if (m && this.faults.stall?.(start)) {
      rec.sent += 1000;
      res.write(body.subarray(0, 1000));
      return; // never ends; close() destroys the socket
    }
    const limit = this.faults.onlyBelow;
    if (m && limit !== undefined && end >= limit) {
      const part = body.subarray(0, Math.max(0, limit - start));
      rec.sent += part.length;
      if (part.length) res.write(part);
      else res.flushHeaders(); // the answer begins; its body never comes
      return; // never ends; close() destroys the socket
    }
    const cut = this.faults.cutAfterBytes;
    if (cut !== undefined && m && body.length > cut) {
      this.faults.cutAfterBytes = undefined;
      rec.sent += cut;
      res.write(body.subarray(0, cut), () => setTimeout(() => res.socket?.destroy(), 10));
      return;
    }
    rec.sent += body.length;
    res.end(body);
  }
}

export function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}
