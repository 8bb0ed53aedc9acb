/**
 * Splits input text into sentences for sentence-by-sentence synthesis. Shared by the flite and espeak
 * engines. Pieces longer than `maxChars` are split further at clause punctuation, then at spaces, so
 * one synthesis call stays short (bounded latency and prompt abort).
 */

const ABBREVIATIONS = new Set([
  'mr', 'mrs', 'ms', 'dr', 'prof', 'sr', 'jr', 'st', 'vs', 'etc', 'e.g', 'i.e', 'no', 'fig', 'mt', 'inc', 'ltd',
  'co', 'jan', 'feb', 'mar', 'apr', 'jun', 'jul', 'aug', 'sep', 'sept', 'oct', 'nov', 'dec', 'approx', 'dept',
]);

export function splitSentences(text: string, maxChars = 240, firstMaxChars = 80): string[] {
  const normalized = text.replace(/\r\n?/g, '\n');
  const out: string[] = [];
  // paragraphs / lines are hard boundaries
  for (const block of normalized.split(/\n\s*\n|\n(?=\s*[-*•\d]+[.)]?\s)/)) {
    const flat = block.replace(/\s+/g, ' ').trim();
    if (!flat) continue;
    for (const s of splitBlock(flat)) {
      for (const piece of splitLong(s, maxChars)) if (/[\p{L}\p{N}]/u.test(piece)) out.push(piece);
    }
  }
  // the first piece decides the time to first audio: a long first sentence is cut at its first
  // clause break (a natural pause), when there is one early enough
  if (out.length > 0 && out[0].length > firstMaxChars) {
    const m = /[,;:]\s/g;
    let r: RegExpExecArray | null;
    while ((r = m.exec(out[0]))) {
      if (r.index < 15) continue;
      if (r.index >= firstMaxChars) break;
      out.splice(0, 1, out[0].slice(0, r.index + 1).trim(), out[0].slice(r.index + 1).trim());
      break;
    }
  }
  return out;
}

function splitBlock(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  // terminal punctuation (possibly repeated, possibly followed by closing quotes/brackets) then whitespace
  const re = /[.!?…]+["'”’)\]]*(?=\s)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    const end = m.index + m[0].length;
    if (m[0][0] === '.' && m[0].length === 1) {
      const word = /(\S+)$/.exec(text.slice(start, m.index))?.[1]?.toLowerCase() ?? '';
      const bare = word.replace(/^["'“‘(\[]+/, '');
      // "Mr." "e.g." "U.S." single initials: not a sentence end
      if (ABBREVIATIONS.has(bare) || /^[a-z]$/i.test(bare) || /^([a-z]\.)+[a-z]$/i.test(bare)) continue;
    }
    const s = text.slice(start, end).trim();
    if (s) out.push(s);
    start = end;
  }
  const rest = text.slice(start).trim();
  if (rest) out.push(rest);
  return out;
}

function splitLong(s: string, maxChars: number): string[] {
  if (s.length <= maxChars) return [s];
  const out: string[] = [];
  let rest = s;
  while (rest.length > maxChars) {
    const window = rest.slice(0, maxChars);
    let cut = -1;
    // prefer clause punctuation in the second half of the window, then any space
    const clause = /[,;:)\]—–-]\s/g;
    let m: RegExpExecArray | null;
    while ((m = clause.exec(window))) if (m.index >= maxChars / 3) cut = m.index + 1;
    if (cut < 0) cut = window.lastIndexOf(' ');
    if (cut <= 0) cut = maxChars;
    out.push(rest.slice(0, cut).trim());
    rest = rest.slice(cut).trim();
  }
  if (rest) out.push(rest);
  return out.filter(Boolean);
}
