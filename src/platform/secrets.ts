/**
 * Secrets an operator types in (a stored model's upstream `api_key`), kept in the database encrypted: AES-256-GCM
 * under a key derived with HKDF-SHA256 from PORTICO_SECRETS_KEY (or, when it is unset, from KEY_PEPPER), with a
 * random 96-bit IV per value and what the value belongs to (a model and a place in its entry) as additional data,
 * so a sealed value copied to another row or place does not open. A sealed value names the key it was sealed with
 * by a fingerprint (HMAC of a fixed text, never the key): opening it under another key says so rather than
 * failing as if the data were corrupt.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1';
const INFO = 'portico stored secrets v1';

export class SecretError extends Error {
  constructor(
    message: string,
    /** `wrong_key`: sealed under another PORTICO_SECRETS_KEY; `corrupt`: not a sealed value, or altered */
    readonly reason: 'wrong_key' | 'corrupt',
  ) {
    super(message);
    this.name = 'SecretError';
  }
}

export class SecretBox {
  private readonly key: Buffer;
  /** which key sealed a value: 8 bytes of an HMAC under the key (says nothing of it) */
  readonly fingerprint: string;

  /** `material`: PORTICO_SECRETS_KEY's text, or the key pepper when it is unset */
  constructor(material: Buffer) {
    this.key = Buffer.from(hkdfSync('sha256', material, Buffer.from('portico'), Buffer.from(INFO), 32));
    this.fingerprint = createHmac('sha256', this.key).update('portico secrets key fingerprint').digest().subarray(0, 8).toString('base64url');
  }

  /** `context`: what the value belongs to (e.g. `model:gpt\u0000api_key`); the same context opens it */
  seal(value: string, context: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    c.setAAD(Buffer.from(context, 'utf8'));
    const body = Buffer.concat([c.update(value, 'utf8'), c.final(), c.getAuthTag()]);
    return `${VERSION}.${this.fingerprint}.${iv.toString('base64url')}.${body.toString('base64url')}`;
  }

  open(sealed: string, context: string): string {
    const [version, fp, iv, body] = sealed.split('.');
    if (version !== VERSION || !fp || !iv || !body) throw new SecretError('not a sealed secret', 'corrupt');
    if (fp !== this.fingerprint) {
      throw new SecretError('it was encrypted with another PORTICO_SECRETS_KEY (or KEY_PEPPER, when that is unset) than this instance has', 'wrong_key');
    }
    const raw = Buffer.from(body, 'base64url');
    if (raw.length < 16) throw new SecretError('not a sealed secret', 'corrupt');
    try {
      const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
      d.setAAD(Buffer.from(context, 'utf8'));
      d.setAuthTag(raw.subarray(raw.length - 16));
      return Buffer.concat([d.update(raw.subarray(0, raw.length - 16)), d.final()]).toString('utf8');
    } catch {
      throw new SecretError('it does not decrypt (altered, or moved from another record)', 'corrupt');
    }
  }
}
