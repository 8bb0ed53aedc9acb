import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { extname, join } from 'node:path';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json',
  '.map': 'application/json',
};

export interface Asset {
  type: string;
  body: Buffer;
  gzip?: Buffer;
  br?: Buffer;
  etag: string;
}

export interface PageAssets {
  /** index.html, or undefined when the page was not built */
  index?: Asset;
  /** /assets/<name> -> asset (hashed names) */
  files: Map<string, Asset>;
}

function load(path: string): Asset {
  const body = readFileSync(path);
  const pre = (ext: string) => (existsSync(path + ext) ? readFileSync(path + ext) : undefined);
  return {
    type: TYPES[extname(path)] ?? 'application/octet-stream',
    body,
    gzip: pre('.gz'),
    br: pre('.br'),
    etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
  };
}

/**
 * Reads the built page (`npm run build` writes it to dist/web: index.html and assets/ with content-hashed names
 * and their .gz/.br companions) into memory once: it is small, and served from memory it costs no disk read.
 */
export function loadPageAssets(dir: string): PageAssets {
  const files = new Map<string, Asset>();
  const assetsDir = join(dir, 'assets');
  if (existsSync(assetsDir)) {
    for (const name of readdirSync(assetsDir)) {
      if (name.endsWith('.gz') || name.endsWith('.br')) continue;
      files.set(name, load(join(assetsDir, name)));
    }
  }
  const indexPath = join(dir, 'index.html');
  return { index: existsSync(indexPath) ? load(indexPath) : undefined, files };
}

/** The encoding to send for an Accept-Encoding header (brotli, then gzip, else none; q=0 refuses one). */
export function pickEncoding(accept: string | undefined, a: Asset): 'br' | 'gzip' | undefined {
  if (!accept) return undefined;
  const accepted = new Set<string>();
  for (const part of accept.split(',')) {
    const [name = '', ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)).find(Boolean);
    if (!q || Number(q[1]) > 0) accepted.add(name.trim());
  }
  if (a.br && accepted.has('br')) return 'br';
  if (a.gzip && (accepted.has('gzip') || accepted.has('*'))) return 'gzip';
  return undefined;
}
