import { createHmac, randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * API key format: `<type>-<32 base62 random chars><6 base62 chars of CRC32>`, e.g. `sk-…` (inference) or
 * `mk-…` (management). 32 base62 characters carry 190 bits of randomness; the checksum lets the server
 * refuse a mistyped or made-up key without touching the database, and lets secret scanners tell a real
 * key from a look-alike.
 */
export const KEY_TYPES = { inference: 'sk', management: 'mk' } as const;
export type KeyKind = keyof typeof KEY_TYPES;

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const KEY_RE = /^(sk|mk)-([0-9A-Za-z]{38})$/;

function randomBase62(n: number): string {
  let out = '';
  while (out.length < n) {
    const buf = randomBytes(n * 2);
    for (const b of buf) {
      // 62 * 4 = 248: reject 248..255 so every character is equally likely
      if (b < 248 && out.length < n) out += ALPHABET[b % 62];
    }
  }
  return out;
}

function checksum(prefixAndBody: string): string {
  let n = crc32(prefixAndBody) >>> 0;
  let out = '';
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = ALPHABET[n % 62] + out;
    n = Math.floor(n / 62);
  }
  return out;
}

export function generateApiKey(kind: KeyKind): string {
  const head = `${KEY_TYPES[kind]}-${randomBase62(BODY_LENGTH)}`;
  return head + checksum(head);
}

/** The key's kind when its shape and checksum are right, else null (no database read needed). */
export function parseApiKey(key: string): KeyKind | null {
  const m = KEY_RE.exec(key);
  if (!m) return null;
  const head = key.slice(0, key.length - CHECKSUM_LENGTH);
  if (checksum(head) !== key.slice(-CHECKSUM_LENGTH)) return null;
  return m[1] === 'sk' ? 'inference' : 'management';
}

/** True when the text looks like one of our keys by its prefix (used to pick key auth over JWT). */
export function looksLikeApiKey(token: string): boolean {
  return token.startsWith('sk-') || token.startsWith('mk-');
}

export function keyDigest(pepper: Buffer, key: string): string {
  return createHmac('sha256', pepper).update(key).digest('hex');
}

/** The masked form shown in listings: the type prefix and 4 characters, an ellipsis, the last 4. */
export function displayParts(key: string): { prefix: string; suffix: string } {
  return { prefix: key.slice(0, 7), suffix: key.slice(-4) };
}

export function displayOf(prefix: string, suffix: string): string {
  return `${prefix}...${suffix}`;
}
