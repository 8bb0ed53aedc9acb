import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { FunctionComponent } from 'preact';
import { useI18n } from '../i18n.js';
import { linkClick } from '../router.js';
import { ErrorBox } from '../components/ui.js';

type ConsoleComponent = FunctionComponent<{ path: string }>;
/** the console's chunk, loaded once (the first load of the page does not carry it) */
let loaded: ConsoleComponent | undefined;

/**
 * The console's address (/console/...): the console for an operator, loaded as a chunk of its own on first use; a
 * plain "not an operator" page for everyone else (the admin API would refuse them anyway: the console is not
 * hidden for safety, only kept out of their way).
 */
export function ConsoleGate({ operator, path }: { operator: boolean | undefined; path: string }) {
  const { t } = useI18n();
  const [Console, setConsole] = useState<ConsoleComponent | undefined>(() => loaded);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    if (!operator || Console) return;
    import('../console/Console.js').then(
      (m) => setConsole(() => (loaded = m.Console)),
      () => setError({ code: 'network', message: '' }),
    );
  }, [operator]);
  if (operator === false) return <NotOperator />;
  if (error) return <ErrorBox error={error} />;
  if (!operator || !Console) return <p class="loading">{t('common.loading')}</p>;
  return <Console path={path} />;
}

function NotOperator() {
  const { t } = useI18n();
  const h1 = useRef<HTMLHeadingElement>(null);
  useLayoutEffect(() => {
    h1.current?.focus();
    document.title = `${t('console.denied.title')} · Portico`;
  });
  return (
    <section class="card denied" id="console-denied">
      <h1 tabIndex={-1} ref={h1}>
        {t('console.denied.title')}
      </h1>
      <p>{t('console.denied.text')}</p>
      <p>
        <a href="/keys" onClick={linkClick}>
          {t('console.denied.back')}
        </a>
      </p>
    </section>
  );
}
