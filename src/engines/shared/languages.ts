/** Language codes and the names whisper (and OpenAI's verbose_json) use for them. */

/** Whisper's language table: ISO-639-1 code -> the lower-case name verbose_json reports. */
export const LANGUAGE_NAMES: Readonly<Record<string, string>> = {
  en: 'english',
  zh: 'chinese',
  de: 'german',
  es: 'spanish',
  ru: 'russian',
  ko: 'korean',
  fr: 'french',
  ja: 'japanese',
  pt: 'portuguese',
  tr: 'turkish',
  pl: 'polish',
  ca: 'catalan',
  nl: 'dutch',
  ar: 'arabic',
  sv: 'swedish',
  it: 'italian',
  id: 'indonesian',
  hi: 'hindi',
  fi: 'finnish',
  vi: 'vietnamese',
  he: 'hebrew',
  uk: 'ukrainian',
  el: 'greek',
  ms: 'malay',
  cs: 'czech',
  ro: 'romanian',
  da: 'danish',
  hu: 'hungarian',
  ta: 'tamil',
  no: 'norwegian',
  th: 'thai',
  ur: 'urdu',
  hr: 'croatian',
  bg: 'bulgarian',
  lt: 'lithuanian',
  la: 'latin',
  mi: 'maori',
  ml: 'malayalam',
  cy: 'welsh',
  sk: 'slovak',
  te: 'telugu',
  fa: 'persian',
  lv: 'latvian',
  bn: 'bengali',
  sr: 'serbian',
  az: 'azerbaijani',
  sl: 'slovenian',
  kn: 'kannada',
  et: 'estonian',
  mk: 'macedonian',
  br: 'breton',
  eu: 'basque',
  is: 'icelandic',
  hy: 'armenian',
  ne: 'nepali',
  mn: 'mongolian',
  bs: 'bosnian',
  kk: 'kazakh',
  sq: 'albanian',
  sw: 'swahili',
  gl: 'galician',
  mr: 'marathi',
  pa: 'punjabi',
  si: 'sinhala',
  km: 'khmer',
  sn: 'shona',
  yo: 'yoruba',
  so: 'somali',
  af: 'afrikaans',
  oc: 'occitan',
  ka: 'georgian',
  be: 'belarusian',
  tg: 'tajik',
  sd: 'sindhi',
  gu: 'gujarati',
  am: 'amharic',
  yi: 'yiddish',
  lo: 'lao',
  uz: 'uzbek',
  fo: 'faroese',
  ht: 'haitian creole',
  ps: 'pashto',
  tk: 'turkmen',
  nn: 'nynorsk',
  mt: 'maltese',
  sa: 'sanskrit',
  lb: 'luxembourgish',
  my: 'myanmar',
  bo: 'tibetan',
  tl: 'tagalog',
  mg: 'malagasy',
  as: 'assamese',
  tt: 'tatar',
  haw: 'hawaiian',
  ln: 'lingala',
  ha: 'hausa',
  ba: 'bashkir',
  jv: 'javanese',
  su: 'sundanese',
  yue: 'cantonese',
};

const NAME_TO_CODE: Record<string, string> = Object.fromEntries(Object.entries(LANGUAGE_NAMES).map(([c, n]) => [n, c]));
Object.assign(NAME_TO_CODE, {
  burmese: 'my',
  valencian: 'ca',
  flemish: 'nl',
  haitian: 'ht',
  letzeburgesch: 'lb',
  pushto: 'ps',
  panjabi: 'pa',
  moldavian: 'ro',
  moldovan: 'ro',
  sinhalese: 'si',
  castilian: 'es',
  mandarin: 'zh',
  jw: 'jv',
});

/** "english" / "English" / "en" / "en-US" -> "en"; undefined when unknown. */
export function languageCode(nameOrCode: string | undefined | null): string | undefined {
  if (!nameOrCode) return undefined;
  const s = nameOrCode.trim().toLowerCase();
  const byName = own(NAME_TO_CODE, s);
  if (byName) return byName;
  if (own(LANGUAGE_NAMES, s)) return s;
  const base = s.split(/[-_]/)[0] ?? '';
  if (own(LANGUAGE_NAMES, base)) return base;
  return undefined;
}

/**
 * A table's own entry: a plain lookup would find Object.prototype's members, so an upstream reporting
 * "constructor" or "toString" as its language would turn into a function instead of an unknown language.
 */
function own(table: Readonly<Record<string, string>>, key: string): string | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

/** "en" -> "english" (the verbose_json form); unknown codes are returned as given. */
export function languageName(code: string): string {
  return own(LANGUAGE_NAMES, code.toLowerCase()) ?? code;
}
