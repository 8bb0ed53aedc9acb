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
/** the category the server puts before a specific message ("unauthorized: API key has been revoked") */
const CATEGORY = /^(unauthorized|permission denied|未授权|权限不足)\s*[:：]\s*/i;
/** what a gateway or proxy in front of Portico answers when Portico is away: their pages are not Portico's errors */
const BARE_CATEGORY = /^(unauthorized|permission denied|未授权|权限不足)$/i;
const GATEWAY = new Set([502, 503, 504]);

/** A server message as a sentence: without its category prefix, capitalized, ending with a full stop. */
export function plainServerText(message: string): string {
  const rest = message.replace(CATEGORY, '').trim();
  if (!rest) return message;
  const s = rest[0].toUpperCase() + rest.slice(1);
  return /[.!?。！？)）]$/.test(s) ? s : s + (CJK.test(s) ? '。' : '.');
}

/**
 * An error in plain words in the person's language. The browser's own words for a failed connection ("Failed to
 * fetch") and a gateway's answer (HTTP 502, 503, 504 without Portico's error body) become our sentences; the
 * server's message is shown without its category prefix when it is in the page's language (it localizes by
 * Accept-Language, and its text is more specific than ours), else our translation of its code with the server's
 * text as the detail.
 */
export function describeError(err: unknown, lang: Lang, t: T): { message: string; detail?: string } {
  const e = err as ApiError;
  if (!e || typeof e.code !== 'string') return { message: t('err.unknown'), detail: String((err as Error)?.message ?? err) };
  const id = e.requestId ? `request_id ${e.requestId}` : undefined;
  if (e.code === 'network') return { message: t('err.network') };
  if (e.code === 'bad_response') {
    if (GATEWAY.has(e.status)) return { message: t(`err.http${e.status}` as Key), detail: id };
    return { message: t('err.bad_response'), detail: [`HTTP ${e.status}`, id].filter(Boolean).join(' · ') };
  }
  const key = `err.${e.code}` as Key;
  const ours = key in en ? t(key) : undefined;
  const inLanguage = lang === 'zh' ? CJK.test(e.message) : !CJK.test(e.message);
  // a bare category ("unauthorized") says less than our sentence for the code
  if (inLanguage && !(ours && BARE_CATEGORY.test(e.message.trim()))) return { message: plainServerText(e.message), detail: id };
  return { message: ours ?? t('err.unknown'), detail: [e.message, id].filter(Boolean).join(' · ') };
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
