import { render } from 'preact';
import { useEffect, useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, admin, onSessionEnded, portal, setApiLanguage, setCsrfToken, type Me, type Session } from './api.js';
import { I18n, detectLanguage, saveLanguage, translator, type Key, type Lang } from './i18n.js';
import { focusKept, linkClick, navigate, usePath } from './router.js';
import { SignIn } from './pages/SignIn.js';
import { Keys } from './pages/Keys.js';
import { Usage } from './pages/Usage.js';
import { Playground, forgetPlaygroundKeys } from './pages/Playground.js';
import { ConsoleGate } from './pages/ConsoleGate.js';
import './styles.css';

/** Why the sign-in page is shown: a message key, or none. */
export type SignInReason = Key | undefined;

const PAGES: Array<{ path: string; label: Key }> = [
  { path: '/keys', label: 'nav.keys' },
  { path: '/usage', label: 'nav.usage' },
  { path: '/playground', label: 'nav.playground' },
];

const isConsole = (path: string) => path === '/console' || path.startsWith('/console/');

const OIDC_ERRORS: Record<string, Key> = { oidc_failed: 'signin.oidcFailed', oidc_unavailable: 'signin.oidcUnavailable', oidc_off: 'signin.oidcOff' };

function App() {
  const [lang, setLang] = useState<Lang>(detectLanguage);
  const i18n = useMemo(() => ({ lang, t: translator(lang) }), [lang]);
  const { t } = i18n;
  const path = usePath();
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [me, setMe] = useState<Me | null>(null);
  /** whether the person signed in is an operator (GET /v1/admin/whoami answered 200); undefined: not asked yet */
  const [operator, setOperator] = useState<boolean | undefined>(undefined);
  const [reason, setReason] = useState<SignInReason>(undefined);
  const [linkError, setLinkError] = useState<unknown>(null);
  const main = useRef<HTMLElement>(null);

  // a layout effect: a request sent right after the switch (the next click) already asks in the new language
  useLayoutEffect(() => {
    setApiLanguage(lang);
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  }, [lang]);

  const signedIn = (s: Session) => {
    setCsrfToken(s.csrf_token);
    setSession(s);
    setReason(undefined);
    setLinkError(null);
  };
  const signedOut = (why: SignInReason) => {
    setCsrfToken('');
    forgetPlaygroundKeys();
    setSession(null);
    setMe(null);
    setOperator(undefined);
    setReason(why);
    navigate('/signin', true);
  };

  useEffect(() => {
    onSessionEnded((code) => signedOut(code === 'session_expired' ? 'signin.expired' : 'signin.required'));
    // a sign-in link: its token is in the fragment, which no server sees; it leaves the address bar at once
    const redeemLink = async (): Promise<boolean> => {
      const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
      if (!m) return false;
      history.replaceState(null, '', '/signin');
      try {
        signedIn(await portal<Session>('POST', '/session/link', { token: decodeURIComponent(m[1]) }, { quietAuth: true }));
        navigate('/keys', true);
      } catch (e) {
        setSession(null);
        setReason(undefined);
        setLinkError(e);
        navigate('/signin', true);
      }
      return true;
    };
    // the link may also be opened on a page already shown (only the fragment changes: no new load)
    const onHash = () => void redeemLink();
    addEventListener('hashchange', onHash);
    (async () => {
      if (await redeemLink()) return;
      const err = new URLSearchParams(location.search).get('error');
      try {
        signedIn(await portal<Session>('GET', '/session', undefined, { quietAuth: true }));
        if (location.pathname === '/' || location.pathname === '/signin') navigate('/keys', true);
      } catch (e) {
        setSession(null);
        setReason(err && OIDC_ERRORS[err] ? OIDC_ERRORS[err] : e instanceof ApiError && e.code === 'session_expired' ? 'signin.expired' : undefined);
        if (location.pathname !== '/signin') navigate('/signin', true);
      }
    })();
    return () => removeEventListener('hashchange', onHash);
  }, []);

  const loadMe = async () => {
    try {
      setMe(await portal<Me>('GET', '/me'));
    } catch {
      // the session ended (handled) or the server is away: the pages show their own errors
    }
  };
  const loadOperator = async () => {
    try {
      await admin('GET', '/whoami', undefined, { quietAuth: true });
      setOperator(true);
    } catch {
      // 403 for everyone who is not an operator (an organization's administrators included); no answer: no console
      setOperator(false);
    }
  };
  useEffect(() => {
    if (session) {
      void loadMe();
      void loadOperator();
    }
  }, [session]);

  // a new screen: its heading takes the focus (keyboard and screen reader users start there), in a layout effect:
  // before the screen is painted, so no key press lands on the old focus once the new screen shows
  useLayoutEffect(() => {
    if (!focusKept()) main.current?.querySelector<HTMLElement>('h1')?.focus();
    const page = PAGES.find((p) => p.path === path);
    // the console names its own screens
    if (!isConsole(path)) document.title = page ? `${t(page.label)} · Portico` : 'Portico';
  }, [path, session, lang]);

  const switchLanguage = (l: Lang) => {
    setLang(l);
    saveLanguage(l);
  };

  const signOut = async () => {
    try {
      await portal('DELETE', '/session', undefined, { quietAuth: true });
    } catch {
      // the cookie is cleared by the server or already gone; the page forgets the session either way
    }
    signedOut('signin.signedOut');
  };

  let content;
  if (session === undefined) content = <p class="loading">{t('common.loading')}</p>;
  else if (!session || path === '/signin') content = <SignIn reason={reason} linkError={linkError} />;
  else if (path === '/usage') content = <Usage me={me} />;
  else if (isConsole(path)) content = <ConsoleGate operator={operator} path={path} />;
  else if (path === '/playground') content = <Playground me={me} sessionExpiresAt={session.expires_at} />;
  else content = <Keys me={me} reloadMe={loadMe} />;

  return (
    <I18n.Provider value={i18n}>
      <a class="skip" href="#main">
        {t('nav.skip')}
      </a>
      <header class="top">
        <a class="brand" href={session ? '/keys' : '/signin'} onClick={linkClick}>
          Portico
        </a>
        {session && (
          <nav aria-label={t('nav.label')}>
            {PAGES.map((p) => (
              <a href={p.path} onClick={linkClick} aria-current={path === p.path || (p.path === '/keys' && path === '/') ? 'page' : undefined}>
                {t(p.label)}
              </a>
            ))}
            {operator && (
              <a href="/console" id="nav-console" onClick={linkClick} aria-current={isConsole(path) ? 'page' : undefined}>
                {t('nav.console')}
              </a>
            )}
          </nav>
        )}
        <div class="who">
          <label class="lang">
            <span class="visually-hidden">{t('nav.language')}</span>
            <select id="language" value={lang} onChange={(e) => switchLanguage((e.currentTarget as HTMLSelectElement).value as Lang)}>
              <option value="en">English</option>
              <option value="zh">简体中文</option>
            </select>
          </label>
          {session && (
            <>
              <span class="user" title={t('nav.signedInAs', { user: session.user_id })}>
                {session.user_id}
              </span>
              <button type="button" class="secondary" onClick={signOut}>
                {t('nav.signOut')}
              </button>
            </>
          )}
        </div>
      </header>
      <main id="main" ref={main}>
        {content}
      </main>
    </I18n.Provider>
  );
}

render(<App />, document.getElementById('app')!);
