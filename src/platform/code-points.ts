/**
 * Characters as Portico's length limits count them: Unicode code points, as JSON Schema's maxLength and minLength
 * do (a surrogate pair, e.g. an emoji, is one; an unpaired surrogate is one too). Limits and the messages that
 * report a length use this count, never the UTF-16 `length`.
 */
export function codePoints(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n--;
      i++;
    }
  }
  return n;
}
