import { useEffect, useState } from 'preact/hooks';
import { portal, type SignInMethods } from '../api.js';
import { useI18n, type Key } from '../i18n.js';
import { ErrorBox, Notice } from '../components/ui.js';

export function SignIn({ reason, linkError }: { reason?: Key; linkError?: unknown }) {
  const { t } = useI18n();
  const [methods, setMethods] = useState<SignInMethods | null>(null);
  useEffect(() => {
    portal<SignInMethods>('GET', '/session/methods', undefined, { quietAuth: true }).then(setMethods, () => setMethods({ link: true, oidc: false, oidc_login_url: null }));
  }, []);
  return (
    <section class="signin card">
      <h1 tabIndex={-1}>{t('signin.title')}</h1>
      {reason && <Notice kind={reason === 'signin.signedOut' ? 'ok' : 'warn'}>{t(reason)}</Notice>}
      {linkError ? <ErrorBox error={linkError} /> : null}
      {methods?.oidc && methods.oidc_login_url && (
        <div class="method">
          <h2>{t('signin.oidcTitle')}</h2>
          <p>{t('signin.oidcText')}</p>
          <a class="button" href={methods.oidc_login_url} id="oidc-sign-in">
            {t('signin.oidcButton')}
          </a>
        </div>
      )}
      <div class="method">
        <h2>{t('signin.linkTitle')}</h2>
        <p>{t('signin.linkText')}</p>
        <pre class="command">
          <code>portico login --user YOUR_NAME</code>
        </pre>
        <p class="hint">{t('signin.linkHint')}</p>
      </div>
    </section>
  );
}
