/**
 * The two cookies of the web page, written and read by hand: their names are fixed and their values are base64url
 * or JWE compact text (no characters that need encoding), so a general cookie codec adds nothing.
 */
export interface CookieOptions {
  httpOnly: boolean;
  secure: boolean;
  sameSite: 'strict' | 'lax';
  path: string;
  /** seconds; 0 deletes the cookie */
  maxAge: number;
}

const SAFE_VALUE = /^[A-Za-z0-9._~-]*$/;

export function serializeCookie(name: string, value: string, o: CookieOptions): string {
  if (!SAFE_VALUE.test(value)) throw new Error(`cookie ${name}: value has characters that need encoding`);
  return [
    `${name}=${value}`,
    `Path=${o.path}`,
    `Max-Age=${Math.max(0, Math.floor(o.maxAge))}`,
    ...(o.httpOnly ? ['HttpOnly'] : []),
    ...(o.secure ? ['Secure'] : []),
    `SameSite=${o.sameSite === 'strict' ? 'Strict' : 'Lax'}`,
  ].join('; ');
}

/** name -> value of a Cookie header (the first of a repeated name wins, as browsers send the most specific first). */
export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!header) return out;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) value = value.slice(1, -1);
    if (!(name in out)) out[name] = value;
  }
  return out;
}
