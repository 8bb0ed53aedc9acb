/**
 * Splits input text into sentences for sentence-by-sentence synthesis. Shared by the flite and espeak
 * engines. Pieces longer than `maxChars` are split further at clause punctuation, then at spaces, so
 * one synthesis call stays short (bounded latency and prompt abort).
 */

const ABBREVIATIONS = new Set([
  'mr',
  'mrs',
  'ms',
  'dr',
  'prof',
  'sr',
  'jr',
  'st',
  'vs',
  'etc',
  'e.g',
  'i.e',
  'no',
  'fig',
  'mt',
  'inc',
  'ltd',
  'co',
  'jan',
  'feb',
  'mar',
  'apr',
  'jun',
  'jul',
  'aug',
  'sep',
  'sept',
  'oct',
  'nov',
  'dec',
  'approx',
  'dept',
]);

/**
 * `firstMaxChars`: a longer first sentence is cut at its first clause break so audio starts sooner
 * (standard quality); Infinity keeps it whole (hd).
 */
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
  const first = out[0];
  if (first !== undefined && first.length > firstMaxChars) {
    const m = /[,;:]\s|[，、；：]/g;
    let r: RegExpExecArray | null;
    while ((r = m.exec(first))) {
      if (r.index < 15) continue;
      if (r.index >= firstMaxChars) break;
      out.splice(0, 1, first.slice(0, r.index + 1).trim(), first.slice(r.index + 1).trim());
      break;
    }
  }
  return out;
}

/** terminal punctuation (possibly repeated, possibly followed by closing quotes/brackets) then whitespace
 * ... or CJK full stops, which need no space after them (Chinese and Japanese put none) */
const SENTENCE_END = /[.!?…]+["'”’)\]]*(?=\s)|[。！？]+[」』”’）)]*/g;

/** "Mr." "e.g." "U.S." single initials: a full stop after them is not a sentence end */
function isAbbreviation(text: string, start: number, dot: number): boolean {
  const word = /(\S+)$/.exec(text.slice(start, dot))?.[1]?.toLowerCase() ?? '';
  const bare = word.replace(/^["'“‘([]+/, '');
  return ABBREVIATIONS.has(bare) || /^[a-z]$/i.test(bare) || /^([a-z]\.)+[a-z]$/i.test(bare);
}

/**
 * For text that is still being written (a model's answer, streamed): the length of its beginning that is made of
 * whole sentences, by the same rules as splitSentences (a Latin sentence end counts once the space after it has
 * arrived; a blank line ends a paragraph). 0 when no sentence is finished yet.
 */
export function completeSentencesLength(text: string): number {
  let end = 0;
  const para = /\n\s*\n/g;
  let p: RegExpExecArray | null;
  while ((p = para.exec(text))) end = p.index + p[0].length;
  const re = new RegExp(SENTENCE_END.source, 'g');
  let m: RegExpExecArray | null;
  let start = 0;
  while ((m = re.exec(text))) {
    const stop = m.index + m[0].length;
    if (m[0][0] === '.' && m[0].length === 1 && isAbbreviation(text, start, m.index)) continue;
    start = stop;
    if (stop > end) end = stop;
  }
  return end;
}

function splitBlock(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  const re = new RegExp(SENTENCE_END.source, 'g');
  let m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    const end = m.index + m[0].length;
    if (m[0][0] === '.' && m[0].length === 1 && isAbbreviation(text, start, m.index)) continue;
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
    const clause = /[,;:)\]—–-]\s|[，、；：]/g;
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
