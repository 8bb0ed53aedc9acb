import type { ChatMessage, FunctionTool } from '../types.js';

/**
 * Token estimates (for upstreams, and for the features' admission): no OpenAI-compatible server has a standard token-counting endpoint, so this
 * estimates what a BPE tokenizer (OpenAI's o200k_base, and the Llama/Qwen families behave alike) makes of a text,
 * on the safe side: it is used for context-window checks, TPM limits and budgets before the answer, and for usage
 * when an upstream reports none, where counting too high is the safe side. The text is cut into the pieces a BPE
 * pre-tokenizer makes (a word, a run of up to 3 digits, a run of punctuation, a run of spaces) and each piece
 * costs what BPE makes of it on average:
 * - letters (any script but CJK): 1 token per 4 characters of the word, at least 1;
 * - digits: 1 token per 3 digits; punctuation: 1 token per 2 characters (`);`, `":"`, `=>` are often one);
 * - CJK ideographs, kana, hangul and their punctuation: 1 token each (o200k makes ~0.85 of them);
 * - spaces: the one before a word is part of its token (before digits or punctuation it is one of its own);
 *   longer runs (indentation) 1 token per 4;
 * - 4 tokens per message for role and separators (OpenAI's documented per-message overhead is 3-4), 3 to
 *   prime the answer; images 765 tokens (a 1024x1024 image at high detail; 85 at low detail); tools: their JSON
 *   definition as text plus 8 tokens each.
 * Measured against js-tiktoken's o200k_base (test/engines/tokens.test.ts; docs/architecture.md, "Library or our
 * own"): 0.96-1.6x the real count on English, French, Russian, Chinese, Japanese, JavaScript, Python, JSON and
 * numbers, where the former 1-per-4-ASCII-characters rule ranged 0.37x (numbers) to 3.4x (Russian). js-tiktoken
 * itself costs 6-75x more CPU per text and ~150 MiB and seconds to load its ranks, so it is not on the request path.
 */
const LETTER = 1;
const DIGIT = 2;
const PUNCT = 3;
const SPACE = 4;
const WIDE = 5;

function kind(c: number): number {
  if (c < 128) {
    if ((c >= 97 && c <= 122) || (c >= 65 && c <= 90)) return LETTER;
    if (c >= 48 && c <= 57) return DIGIT;
    if (c === 32 || c === 9 || c === 10 || c === 13) return SPACE;
    return PUNCT;
  }
  // CJK punctuation, kana, CJK ideographs (and extension A), hangul, compatibility ideographs, full-width forms
  if ((c >= 0x3000 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x9fff) || (c >= 0xac00 && c <= 0xd7af) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0xff00 && c <= 0xffef)) return WIDE;
  if (c >= 0xd800 && c <= 0xdfff) return WIDE; // astral (emoji, rare ideographs): each half counts, on the safe side
  if (c === 0xa0 || c === 0x2028 || c === 0x2029) return SPACE;
  if ((c >= 0x2000 && c <= 0x206f) || (c >= 0xa1 && c <= 0xbf) || c === 0xd7 || c === 0xf7) return PUNCT;
  return LETTER;
}

/** a count in progress: tokens so far, and the run of characters of one kind not counted yet */
interface Scan {
  n: number;
  run: number;
  runKind: number;
}

/** counts s[from, to) into the scan (a text may be counted in several ranges, in order) */
function scan(st: Scan, s: string, from: number, to: number): void {
  let n = st.n;
  let run = st.run;
  let runKind = st.runKind;
  const close = () => {
    if (run === 0) return;
    if (runKind === LETTER) n += (run + 3) >> 2;
    else if (runKind === DIGIT) n += Math.ceil(run / 3);
    else if (runKind === PUNCT) n += (run + 1) >> 1;
    else if (runKind === SPACE) n += run > 1 ? (run + 2) >> 2 : 0;
  };
  for (let i = from; i < to; i++) {
    const k = kind(s.charCodeAt(i));
    if (k === WIDE) {
      close();
      run = 0;
      runKind = 0;
      n++;
      continue;
    }
    if (k !== runKind) {
      // one space joins the word after it, not digits or punctuation (the pre-tokenizer splits them off)
      if (runKind === SPACE && run === 1 && k !== LETTER) n++;
      close();
      runKind = k;
      run = 0;
    }
    run++;
  }
  st.n = n;
  st.run = run;
  st.runKind = runKind;
}

/** the tokens of a finished scan (its last run counted) */
function total(st: Scan): number {
  const { run, runKind } = st;
  if (run === 0) return st.n;
  if (runKind === LETTER) return st.n + ((run + 3) >> 2);
  if (runKind === DIGIT) return st.n + Math.ceil(run / 3);
  if (runKind === PUNCT) return st.n + ((run + 1) >> 1);
  if (runKind === SPACE) return st.n + (run > 1 ? (run + 2) >> 2 : 0);
  return st.n;
}

export function estimateTextTokens(s: string): number {
  const st: Scan = { n: 0, run: 0, runKind: 0 };
  scan(st, s, 0, s.length);
  return total(st);
}

/** The tokens a request adds besides its texts (per message, images, tool calls, tools); each text goes to `text`. */
function visit(messages: readonly ChatMessage[], tools: readonly FunctionTool[] | undefined, text: (s: string) => void): number {
  let n = 3;
  for (const m of messages) {
    n += 4;
    if (typeof m.content === 'string') text(m.content);
    else
      for (const p of m.content) {
        if (p.type === 'text') text(p.text);
        else n += p.detail === 'low' ? 85 : 765;
      }
    if (m.name) {
      n += 1;
      text(m.name);
    }
    if (m.reasoning) text(m.reasoning);
    if (m.toolCalls)
      for (const c of m.toolCalls) {
        n += 4;
        text(c.name);
        text(c.arguments);
      }
  }
  if (tools?.length) {
    for (const t of tools) {
      n += 8;
      text(JSON.stringify(t));
    }
  }
  return n;
}

export function estimateTokens(messages: readonly ChatMessage[], tools?: readonly FunctionTool[]): number {
  let texts = 0;
  return visit(messages, tools, (s) => (texts += estimateTextTokens(s))) + texts;
}

/** characters counted between two turns of the event loop (2-10 ms, the first time before the code is optimized) */
export const SCAN_SLICE = 256 * 1024;

/** the characters of a request's message texts (what the estimate walks), stopping once past `limit` */
function textChars(messages: readonly ChatMessage[], limit: number): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length;
    else for (const p of m.content) if (p.type === 'text') n += p.text.length;
    n += (m.reasoning?.length ?? 0) + (m.toolCalls?.reduce((a, c) => a + c.arguments.length, 0) ?? 0);
    if (n >= limit) break;
  }
  return n;
}

/**
 * estimateTokens, the same number, for requests of any size: one past SCAN_SLICE characters is counted a slice
 * at a time with a turn of the event loop between slices (the largest accepted input, 16 Mi characters, is
 * 50-350 ms of counting, and a context-window fit counts it several times). A smaller one is counted at once.
 */
export async function estimateTokensInTurns(messages: readonly ChatMessage[], tools?: readonly FunctionTool[]): Promise<number> {
  if (textChars(messages, SCAN_SLICE) < SCAN_SLICE) return estimateTokens(messages, tools);
  const texts: string[] = [];
  const n = visit(messages, tools, (s) => texts.push(s));
  return n + (await countInTurns(texts));
}

/** the sum of estimateTextTokens over `texts`, counted a slice of SCAN_SLICE characters at a time (a turn before each) */
async function countInTurns(texts: readonly string[]): Promise<number> {
  let n = 0;
  // the first slice too after a turn: the caller has usually just done work of its own in this one
  let budget = 0;
  for (const s of texts) {
    const st: Scan = { n: 0, run: 0, runKind: 0 };
    for (let at = 0; at < s.length;) {
      if (budget <= 0) {
        await new Promise<void>((r) => setImmediate(r));
        budget = SCAN_SLICE;
      }
      const end = Math.min(s.length, at + budget);
      scan(st, s, at, end);
      budget -= end - at;
      at = end;
    }
    n += total(st);
  }
  return n;
}

/**
 * The sum of estimateTextTokens over `texts` (an embeddings request's inputs), the same number; past SCAN_SLICE
 * characters in all, counted in slices with a turn of the event loop between them (2048 inputs may be 16 Mi
 * characters). Fewer are counted at once.
 */
export function estimateTextsTokensInTurns(texts: readonly string[]): number | Promise<number> {
  let chars = 0;
  for (const s of texts) if ((chars += s.length) >= SCAN_SLICE) return countInTurns(texts);
  let n = 0;
  for (const s of texts) n += estimateTextTokens(s);
  return n;
}
