/**
 * Which language a sentence is written in, as far as its script tells, for the embedded voices: flite speaks
 * English only, espeak-ng has voices for many languages. A sentence in Latin script (or with no letters) is
 * spoken by the voice itself; a sentence in another script goes to the espeak-ng voice of that script's
 * language (Chinese characters: Mandarin, kana: Japanese, Cyrillic: Russian or Ukrainian...). Scripts that
 * espeak-ng cannot read acceptably here (Thai, Hebrew without vowel points, Myanmar...) are refused.
 *
 * Latin-script languages are not told apart (French text is read by the English voice, as it is written).
 */

export interface ScriptLanguage {
  /** Unicode script name (for messages) */
  script: string;
  /** espeak-ng voice (language) id */
  espeak: string;
  /** language name, for messages and docs */
  language: string;
}

interface ScriptRule {
  script: string;
  re: RegExp;
  language: (sentence: string) => { espeak: string; language: string };
}

const fixed = (espeak: string, language: string) => () => ({ espeak, language });

/** Scripts spoken through espeak-ng (each was checked to give the language's phonemes, not letter names). */
const SUPPORTED: readonly ScriptRule[] = [
  { script: 'Han', re: /\p{Script=Han}/gu, language: fixed('cmn', 'Chinese (Mandarin)') },
  { script: 'Kana', re: /[\p{Script=Hiragana}\p{Script=Katakana}]/gu, language: fixed('ja', 'Japanese') },
  { script: 'Hangul', re: /\p{Script=Hangul}/gu, language: fixed('ko', 'Korean') },
  {
    script: 'Cyrillic',
    re: /\p{Script=Cyrillic}/gu,
    language: (s) => (/[ієїґІЄЇҐ]/u.test(s) ? { espeak: 'uk', language: 'Ukrainian' } : { espeak: 'ru', language: 'Russian' }),
  },
  { script: 'Greek', re: /\p{Script=Greek}/gu, language: fixed('el', 'Greek') },
  {
    script: 'Arabic',
    re: /\p{Script=Arabic}/gu,
    language: (s) => (/[ٹڈڑںےۓھ]/u.test(s) ? { espeak: 'ur', language: 'Urdu' } : /[پچژگ]/u.test(s) ? { espeak: 'fa', language: 'Persian' } : { espeak: 'ar', language: 'Arabic' }),
  },
  { script: 'Devanagari', re: /\p{Script=Devanagari}/gu, language: fixed('hi', 'Hindi') },
  { script: 'Bengali', re: /\p{Script=Bengali}/gu, language: fixed('bn', 'Bengali') },
  { script: 'Gurmukhi', re: /\p{Script=Gurmukhi}/gu, language: fixed('pa', 'Punjabi') },
  { script: 'Gujarati', re: /\p{Script=Gujarati}/gu, language: fixed('gu', 'Gujarati') },
  { script: 'Oriya', re: /\p{Script=Oriya}/gu, language: fixed('or', 'Oriya') },
  { script: 'Tamil', re: /\p{Script=Tamil}/gu, language: fixed('ta', 'Tamil') },
  { script: 'Telugu', re: /\p{Script=Telugu}/gu, language: fixed('te', 'Telugu') },
  { script: 'Kannada', re: /\p{Script=Kannada}/gu, language: fixed('kn', 'Kannada') },
  { script: 'Malayalam', re: /\p{Script=Malayalam}/gu, language: fixed('ml', 'Malayalam') },
  { script: 'Sinhala', re: /\p{Script=Sinhala}/gu, language: fixed('si', 'Sinhala') },
  { script: 'Georgian', re: /\p{Script=Georgian}/gu, language: fixed('ka', 'Georgian') },
  { script: 'Armenian', re: /\p{Script=Armenian}/gu, language: fixed('hy', 'Armenian') },
  { script: 'Ethiopic', re: /\p{Script=Ethiopic}/gu, language: fixed('am', 'Amharic') },
];

/** The espeak-ng language voices the script table uses (the espeak engine accepts these with any variant). */
export const SCRIPT_LANGUAGE_VOICES: readonly string[] = [
  'cmn',
  'ja',
  'ko',
  'ru',
  'uk',
  'el',
  'ar',
  'fa',
  'ur',
  'hi',
  'bn',
  'pa',
  'gu',
  'or',
  'ta',
  'te',
  'kn',
  'ml',
  'si',
  'ka',
  'hy',
  'am',
];

/** Names of common scripts that are not supported, for a clear message (any other letter is "unsupported"). */
const KNOWN_UNSUPPORTED = [
  'Thai',
  'Hebrew',
  'Myanmar',
  'Lao',
  'Khmer',
  'Tibetan',
  'Bopomofo',
  'Mongolian',
  'Syriac',
  'Thaana',
  'Cherokee',
  'Tifinagh',
  'Yi',
  'Javanese',
  'Balinese',
  'Canadian_Aboriginal',
  'Ogham',
  'Runic',
  'Nko',
  'Vai',
];
const KNOWN_UNSUPPORTED_RE = KNOWN_UNSUPPORTED.map((s) => ({ script: s.replace(/_/g, ' '), re: new RegExp(`\\p{Script=${s}}`, 'u') }));

/** A letter of a script this table does not handle: neither Latin nor one of the supported scripts. */
const OTHER_LETTER = new RegExp(`(?![\\p{Script=Latin}\\p{Script=Common}\\p{Script=Inherited}${SUPPORTED.map((r) => r.re.source.replace(/^\[|\]$/g, '')).join('')}])\\p{L}`, 'u');

export type SentenceLanguage = { kind: 'voice' } | { kind: 'espeak'; espeak: string; language: string; script: string } | { kind: 'unsupported'; script: string; reason: string };

function count(re: RegExp, s: string): number {
  re.lastIndex = 0;
  let n = 0;
  while (re.exec(s)) n++;
  return n;
}

/** The language of one sentence: the voice's own (Latin script, digits, symbols), an espeak-ng language, or unsupported. */
export function sentenceLanguage(sentence: string): SentenceLanguage {
  const other = OTHER_LETTER.exec(sentence);
  if (other) {
    const script = KNOWN_UNSUPPORTED_RE.find((k) => k.re.test(other[0]))?.script ?? `U+${other[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
    return { kind: 'unsupported', script, reason: `the ${script} script has no voice here` };
  }
  let best: ScriptRule | undefined;
  let bestCount = 0;
  const counts = new Map<string, number>();
  for (const rule of SUPPORTED) {
    const n = count(rule.re, sentence);
    counts.set(rule.script, n);
    if (n > bestCount) {
      best = rule;
      bestCount = n;
    }
  }
  if (!best) return { kind: 'voice' };
  // Japanese: any kana makes the sentence Japanese; espeak-ng reads kana but not kanji
  if ((counts.get('Kana') ?? 0) > 0) {
    if ((counts.get('Han') ?? 0) > 0) {
      return { kind: 'unsupported', script: 'Han', reason: 'Japanese kanji cannot be read by the Japanese voice (espeak-ng reads kana only); write them in kana' };
    }
    best = SUPPORTED.find((r) => r.script === 'Kana')!;
  }
  return { kind: 'espeak', script: best.script, ...best.language(sentence) };
}
