/**
 * The sealed content of `compaction` items (POST /v1/responses/compact): what the item stands for (the summary
 * the model wrote) travels with the client, so no instance has to keep it, and only Portico can read it back.
 *
 * The seal is a JWE in compact form (jose: `dir` + A256GCM, authenticated encryption) under a key derived by
 * HKDF-SHA256 from KEY_PEPPER, the secret every instance already shares (API keys verify on every instance only
 * because they share it). The owner (the user id) is inside the sealed claims and is checked on opening, so an
 * item another user was given is refused like an altered one. A seal made under another pepper (another server,
 * or after the pepper was changed) does not open either. See docs/api.md, "Compaction".
 */
import { hkdfSync } from 'node:crypto';
import { EncryptJWT, jwtDecrypt } from 'jose';

const AUDIENCE = 'portico:responses:compaction';
const INFO = 'portico/responses/compaction/v1';
/** the seal's format version, inside the sealed claims */
const VERSION = 1;

/** What a compaction item stands for once opened. */
export interface CompactionContent {
  /** the summary of everything the window does not keep verbatim */
  summary: string;
  /** the model that wrote it (Portico's name) */
  model: string;
  /** when it was made (Unix seconds) */
  createdAt: number;
}

export class Sealer {
  private readonly key: Uint8Array;

  constructor(secret: Buffer) {
    this.key = new Uint8Array(hkdfSync('sha256', secret, Buffer.from('portico'), INFO, 32));
  }

  /** seals `c` for `owner`: opaque text, base64url, safe in JSON */
  seal(c: CompactionContent, owner: string): Promise<string> {
    return new EncryptJWT({ v: VERSION, sum: c.summary, mdl: c.model })
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', typ: 'portico-compaction' })
      .setSubject(owner)
      .setAudience(AUDIENCE)
      .setIssuedAt(c.createdAt)
      .encrypt(this.key);
  }

  /** the content, or undefined when the text was altered, was made by another server or belongs to another owner */
  async open(sealed: string, owner: string): Promise<CompactionContent | undefined> {
    try {
      const { payload } = await jwtDecrypt(sealed, this.key, {
        keyManagementAlgorithms: ['dir'],
        contentEncryptionAlgorithms: ['A256GCM'],
        audience: AUDIENCE,
        subject: owner,
        requiredClaims: ['sub', 'iat'],
      });
      if (payload.v !== VERSION || typeof payload.sum !== 'string' || typeof payload.mdl !== 'string' || typeof payload.iat !== 'number') return undefined;
      return { summary: payload.sum, model: payload.mdl, createdAt: payload.iat };
    } catch {
      return undefined;
    }
  }
}
