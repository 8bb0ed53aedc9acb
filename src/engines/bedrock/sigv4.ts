/**
 * AWS Signature Version 4 (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html),
 * with node:crypto: the AWS SDK is a dev dependency only (test/engines/bedrock.test.ts checks this signer against
 * the SDK's own, @smithy/signature-v4, header for header). Only what Bedrock's runtime needs: a request signed in
 * its Authorization header, its body's SHA-256 in x-amz-content-sha256 (as the SDK sends it), no query string.
 */
import { createHash, createHmac } from 'node:crypto';

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

export interface SignInput {
  method: string;
  /** the host the request goes to (with its port when not the scheme's default), as the Host header says */
  host: string;
  /** the path as sent (already percent-encoded) */
  path: string;
  headers: Record<string, string>;
  body: string | Buffer | undefined;
  region: string;
  service: string;
  credentials: AwsCredentials;
  /** the signing time (default now) */
  date?: Date;
}

/** headers never signed: they may change on the way (the SDK's list, smithy's ALWAYS_UNSIGNABLE_HEADERS) */
const UNSIGNABLE = new Set([
  'authorization',
  'cache-control',
  'connection',
  'expect',
  'from',
  'keep-alive',
  'max-forwards',
  'pragma',
  'referer',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'user-agent',
  'x-amzn-trace-id',
]);

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const hmac = (key: string | Buffer, data: string) => createHmac('sha256', key).update(data).digest();

/** RFC 3986 encoding, as AWS wants it (encodeURIComponent leaves !'()* alone) */
const escape = (s: string) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());

/**
 * The canonical URI of a service other than S3: the path normalized, then each segment encoded once more
 * (a %3A in the path is %253A here), as the SDK does (uriEscapePath).
 */
function canonicalPath(path: string): string {
  const segments: string[] = [];
  for (const seg of path.split('/')) {
    if (seg.length === 0 || seg === '.') continue;
    if (seg === '..') segments.pop();
    else segments.push(seg);
  }
  const p = `${path.startsWith('/') ? '/' : ''}${segments.join('/')}${segments.length > 0 && path.endsWith('/') ? '/' : ''}`;
  return escape(p).replace(/%2F/g, '/');
}

/** `YYYYMMDD'T'HHMMSS'Z'` */
export function amzDate(d: Date): string {
  return d
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

/** The signature's parts for a request: what the mock recomputes to check a request it got. */
export function signature(input: SignInput & { amzDate: string; signedHeaders: string[] }): string {
  const day = input.amzDate.slice(0, 8);
  const scope = `${day}/${input.region}/${input.service}/aws4_request`;
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(input.headers)) lower[k.toLowerCase()] = String(v).trim().replace(/\s+/g, ' ');
  const canonicalHeaders = input.signedHeaders.map((h) => `${h}:${lower[h] ?? ''}\n`).join('');
  const payloadHash = lower['x-amz-content-sha256'] ?? sha256(input.body ?? '');
  const canonical = [input.method.toUpperCase(), canonicalPath(input.path), '', canonicalHeaders, input.signedHeaders.join(';'), payloadHash].join('\n');
  const toSign = ['AWS4-HMAC-SHA256', input.amzDate, scope, sha256(canonical)].join('\n');
  const kDate = hmac('AWS4' + input.credentials.secretAccessKey, day);
  const kSigning = hmac(hmac(hmac(kDate, input.region), input.service), 'aws4_request');
  return createHmac('sha256', kSigning).update(toSign).digest('hex');
}

/** The request's headers, signed: host, x-amz-date, x-amz-content-sha256, x-amz-security-token (when a session), authorization. */
export function signRequest(input: SignInput): Record<string, string> {
  const date = amzDate(input.date ?? new Date());
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(input.headers)) if (k.toLowerCase() !== 'authorization') headers[k.toLowerCase()] = v;
  headers.host = input.host;
  headers['x-amz-date'] = date;
  headers['x-amz-content-sha256'] = sha256(input.body ?? '');
  if (input.credentials.sessionToken) headers['x-amz-security-token'] = input.credentials.sessionToken;
  const signedHeaders = Object.keys(headers)
    .filter((h) => !UNSIGNABLE.has(h))
    .sort();
  const sig = signature({ ...input, headers, amzDate: date, signedHeaders });
  const scope = `${date.slice(0, 8)}/${input.region}/${input.service}/aws4_request`;
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${input.credentials.accessKeyId}/${scope}, SignedHeaders=${signedHeaders.join(';')}, Signature=${sig}`;
  return headers;
}
