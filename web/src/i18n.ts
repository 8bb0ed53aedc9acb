import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import { en } from './lang/en.js';
import { zh } from './lang/zh.js';
import type { ApiError } from './api.js';

export type Lang = 'en' | 'zh';
export type Key = keyof typeof en;
const TABLES: Record<Lang, Record<Key, string>> = { en, zh };
const STORE = 'portico.lang';

/** The language chosen on this page before (a preference, not a secret), else the browser's first we speak. */
export function detectLanguage(): Lang {
  try {
    const saved = localStorage.getItem(STORE);
    if (saved === 'en' || saved === 'zh') return saved;
  } catch {
    // storage may be off: follow the browser
  }
  for (const l of navigator.languages ?? [navigator.language]) {
    const tag = l.toLowerCase();
    if (tag.startsWith('zh')) return 'zh';
    if (tag.startsWith('en')) return 'en';
  }
  return 'en';
}

export function saveLanguage(lang: Lang) {
  try {
    localStorage.setItem(STORE, lang);
  } catch {
    // not kept across visits
  }
}

export type T = (key: Key, vars?: Record<string, string | number>) => string;

export function translator(lang: Lang): T {
  const table = TABLES[lang];
  return (key, vars) => {
    let s = table[key] ?? en[key] ?? key;
    if (vars) for (const [k, v] of Object.entries(vars)) s = s.split(`{${k}}`).join(String(v));
    return s;
  };
}

export const I18n = createContext<{ lang: Lang; t: T }>({ lang: 'en', t: translator('en') });
export const useI18n = () => useContext(I18n);

const CJK = /[\u3400-\u9fff]/;

/**
 * An API error in the person's language: the server's own message when it is already in that language (it
 * localizes some by Accept-Language), else our translation of its code; the server's text stays as the detail.
 */
export function describeError(err: unknown, lang: Lang, t: T): { message: string; detail?: string } {
  const e = err as ApiError;
  if (!e || typeof e.code !== 'string') return { message: t('err.unknown'), detail: String((err as Error)?.message ?? err) };
  const id = e.requestId ? `request_id ${e.requestId}` : undefined;
  if (lang === 'en' || CJK.test(e.message)) return { message: e.message, detail: id };
  const key = `err.${e.code}` as Key;
  if (key in en) return { message: t(key), detail: [e.message, id].filter(Boolean).join(' · ') };
  return { message: t('err.unknown'), detail: [e.message, id].filter(Boolean).join(' · ') };
}

export function formatDate(lang: Lang, unix: number, withTime = false): string {
  const d = new Date(unix * 1000);
  return new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', withTime ? { dateStyle: 'medium', timeStyle: 'short' } : { dateStyle: 'medium' }).format(d);
}

export function formatNumber(lang: Lang, n: number, digits = 0): string {
  return new Intl.NumberFormat(lang === 'zh' ? 'zh-CN' : 'en-US', { maximumFractionDigits: digits }).format(n);
}

const dayFormats = new Map<Lang, Intl.DateTimeFormat>();
/** A UTC day (YYYY-MM-DD) as a short date without a clock time: "20 Nov", "11月20日". */
export function formatDay(lang: Lang, day: string): string {
  let f = dayFormats.get(lang);
  if (!f) dayFormats.set(lang, (f = new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', { month: 'short', day: 'numeric', timeZone: 'UTC' })));
  return f.format(new Date(`${day}T00:00:00Z`));
}
