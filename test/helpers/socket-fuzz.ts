/**
 * Raw-socket fuzzing of a running Portico (issue 9, "Done when"): requests with malformed framing (a wrong
 * Content-Length, truncated bodies, odd whitespace, bad chunk sizes, huge headers, bare LF, garbage) and
 * ordinary ones, with and without a valid key. Each case on a connection of its own; a case is done when the
 * server answers and closes, closes, or the client gives up after `hangMs` (a hung socket). Used by
 * bench/socket-fuzz.ts (≥10,000 cases) and test/platform/socket-fuzz.test.ts (a few hundred).
 */
import net from 'node:net';

export interface FuzzResult {
  cases: number;
  /** answers by status class */
  statuses: Record<string, number>;
  fiveXX: Array<{ kind: string; status: number }>;
  /** connections neither answered nor closed within hangMs */
  hung: Array<{ kind: string; ms: number }>;
  ms: number;
}

/** a small deterministic random source (the runs are repeatable) */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

const PATHS = [
  '/v1/responses',
  '/v1/chat/completions',
  '/v1/responses/input_tokens',
  '/v1/embeddings',
  '/v1/audio/speech',
  '/v1/audio/transcriptions',
  '/v1/models',
  '/v1/portal/api-keys',
  '/healthz',
  '/v1/responses/resp_x',
];

/** one case: the bytes to send, and whether the client stops sending without closing (a truncated body) */
export function fuzzCase(r: () => number, key: string): { kind: string; bytes: Buffer } {
  const path = PATHS[Math.floor(r() * PATHS.length)]!;
  const auth = r() < 0.5 ? `Authorization: Bearer ${key}\r\n` : r() < 0.5 ? 'Authorization: Bearer sk-forged\r\n' : '';
  const body = JSON.stringify({ model: 'gpt-test', input: 'hi', messages: [{ role: 'user', content: 'hi' }], voice: 'alloy' });
  const pick = Math.floor(r() * 14);
  const head = (extra: string, method = 'POST') => `${method} ${path} HTTP/1.1\r\nHost: x\r\n${auth}${extra}`;
  switch (pick) {
    case 0:
      return { kind: 'valid', bytes: Buffer.from(`${head('Content-Type: application/json\r\n')}Content-Length: ${body.length}\r\n\r\n${body}`) };
    case 1: // Content-Length larger than the body (the rest never comes)
      return { kind: 'cl-too-long', bytes: Buffer.from(`${head('Content-Type: application/json\r\n')}Content-Length: ${body.length + 1 + Math.floor(r() * 1000)}\r\n\r\n${body}`) };
    case 2: // Content-Length shorter: the rest reads as the next request
      return { kind: 'cl-too-short', bytes: Buffer.from(`${head('Content-Type: application/json\r\n')}Content-Length: ${Math.floor(r() * body.length)}\r\n\r\n${body}`) };
    case 3: // two Content-Length headers that disagree, or a bad one
      return {
        kind: 'cl-bad',
        bytes: Buffer.from(
          `${head('Content-Type: application/json\r\n')}Content-Length: ${r() < 0.5 ? `${body.length}\r\nContent-Length: 3` : ['-1', '1e3', ' 12 ', '0x10', '99999999999999999999'][Math.floor(r() * 5)]}\r\n\r\n${body}`,
        ),
      };
    case 4: {
      // chunked with bad chunk sizes
      const sizes = ['zz', '-5', 'ffffffffffffffff', '1;ext', `${(body.length + 10).toString(16)}`, ''];
      return {
        kind: 'chunk-bad',
        bytes: Buffer.from(`${head('Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n')}\r\n${sizes[Math.floor(r() * sizes.length)]}\r\n${body}\r\n0\r\n\r\n`),
      };
    }
    case 5: // chunked truncated mid-chunk
      return {
        kind: 'chunk-truncated',
        bytes: Buffer.from(`${head('Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n')}\r\n${(body.length * 2).toString(16)}\r\n${body}`),
      };
    case 6: // odd whitespace in the request line and headers
      return {
        kind: 'whitespace',
        bytes: Buffer.from(
          [
            `POST  ${path} HTTP/1.1\r\nHost: x\r\n\r\n`,
            `POST ${path} HTTP/1.1 \r\nHost: x\r\n\r\n`,
            `POST ${path} HTTP/1.1\r\nHost : x\r\n\r\n`,
            `POST ${path} HTTP/1.1\r\n Host: x\r\n\r\n`,
            `POST\t${path} HTTP/1.1\r\n\r\n`,
          ][Math.floor(r() * 5)]!,
        ),
      };
    case 7: // bare LF line ends
      return {
        kind: 'bare-lf',
        bytes: Buffer.from(`POST ${path} HTTP/1.1\nHost: x\n${auth.replace('\r', '')}Content-Type: application/json\nContent-Length: ${body.length}\n\n${body}`),
      };
    case 8: // a huge header (over Node's 16 KiB header limit, or just under it)
      return { kind: 'huge-header', bytes: Buffer.from(`${head(`X-Big: ${'a'.repeat(r() < 0.5 ? 20_000 : 15_000)}\r\n`, 'GET')}\r\n`) };
    case 9: // many headers
      return { kind: 'many-headers', bytes: Buffer.from(`${head(Array.from({ length: 3000 }, (_, i) => `X-${i}: v\r\n`).join(''), 'GET')}\r\n`) };
    case 10: // garbage
      return { kind: 'garbage', bytes: Buffer.from(Array.from({ length: 1 + Math.floor(r() * 300) }, () => Math.floor(r() * 256))) };
    case 11: // both Transfer-Encoding and Content-Length (request smuggling shape)
      return {
        kind: 'te-and-cl',
        bytes: Buffer.from(
          `${head('Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n')}Content-Length: 4\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
        ),
      };
    case 12: {
      // a body of invalid or odd JSON
      const bad = ['{', '[]', 'null', '{"model":', '\u0000', '{"model":"gpt-test","input":[' + '['.repeat(200) + ']'.repeat(200) + ']}', '"x"'][Math.floor(r() * 7)]!;
      return { kind: 'bad-json', bytes: Buffer.from(`${head('Content-Type: application/json\r\n')}Content-Length: ${Buffer.byteLength(bad)}\r\n\r\n${bad}`) };
    }
    default: // a wrong method or version
      return { kind: 'method', bytes: Buffer.from(`${['BREW', 'GET', 'DELETE', 'PUT'][Math.floor(r() * 4)]} ${path} HTTP/${r() < 0.5 ? '1.1' : '2.7'}\r\nHost: x\r\n${auth}\r\n`) };
  }
}

function one(url: string, c: { kind: string; bytes: Buffer }, hangMs: number): Promise<{ status: number; hung: boolean; ms: number }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const t0 = Date.now();
    const sock = net.connect(Number(port), hostname);
    let data = '';
    let settled = false;
    const done = (hung: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(data)?.[1] ?? 0), hung, ms: Date.now() - t0 });
    };
    // an answer ends the case (the server may keep the connection for the body it waits for: that is not a hang)
    sock.on('data', (d) => {
      data += d.toString('latin1');
      if (/\r\n\r\n/.test(data)) setTimeout(() => done(false), 5);
    });
    sock.on('error', () => done(false));
    sock.on('close', () => done(false));
    const timer = setTimeout(() => done(true), hangMs);
    sock.write(c.bytes);
  });
}

/** Runs `cases` cases, `concurrency` at a time. */
export async function socketFuzz(o: {
  url: string;
  key: string;
  cases: number;
  concurrency: number;
  hangMs: number;
  seed?: number;
  onProgress?: (n: number) => void;
}): Promise<FuzzResult> {
  const r = rng(o.seed ?? 9);
  const res: FuzzResult = { cases: 0, statuses: {}, fiveXX: [], hung: [], ms: 0 };
  const t0 = Date.now();
  let next = 0;
  const worker = async () => {
    while (next < o.cases) {
      next++;
      const c = fuzzCase(r, o.key);
      const out = await one(o.url, c, o.hangMs);
      res.cases++;
      const cls = out.status ? `${Math.floor(out.status / 100)}xx` : 'closed';
      res.statuses[cls] = (res.statuses[cls] ?? 0) + 1;
      if (out.status >= 500) res.fiveXX.push({ kind: c.kind, status: out.status });
      if (out.hung) res.hung.push({ kind: c.kind, ms: out.ms });
      if (res.cases % 1000 === 0) o.onProgress?.(res.cases);
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  res.ms = Date.now() - t0;
  return res;
}
