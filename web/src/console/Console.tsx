import type { FunctionComponent } from 'preact';
import { useLayoutEffect, useRef } from 'preact/hooks';
import { useI18n, type Key } from '../i18n.js';
import { linkClick, navigate } from '../router.js';
import { Users } from './Users.js';
import { Orgs } from './Orgs.js';
import { Budgets } from './Budgets.js';
import { Usage } from './Usage.js';
import { Audit } from './Audit.js';
import { Operators } from './Operators.js';
import { Models } from './Models.js';
import { Health } from './Health.js';
import { Requests } from './Requests.js';

/** What every screen of the console gets: the rest of the address after its own (`/console/users/alice` → `alice`). */
export interface ScreenProps {
  sub?: string;
}

/**
 * The console's screens, in the order of its navigation: one slot each (/console/<id>, a component, a label
 * `console.<id>.nav`). Add a screen here and in en.ts/zh.ts (a block `console.<id>.*`).
 */
const SCREENS: Array<{ id: string; label: Key; component: FunctionComponent<ScreenProps> }> = [
  { id: 'users', label: 'console.users.nav', component: Users },
  { id: 'orgs', label: 'console.orgs.nav', component: Orgs },
  { id: 'usage', label: 'console.usage.nav', component: Usage },
  { id: 'requests', label: 'console.requests.nav', component: Requests },
  { id: 'budgets', label: 'console.budgets.nav', component: Budgets },
  { id: 'models', label: 'console.models.nav', component: Models },
  { id: 'health', label: 'console.health.nav', component: Health },
  { id: 'audit', label: 'console.audit.nav', component: Audit },
  { id: 'operators', label: 'console.operators.nav', component: Operators },
];

/** The operator's console (its own chunk, loaded by pages/ConsoleGate.tsx once GET /v1/admin/whoami answered 200). */
export function Console({ path }: { path: string }) {
  const { t } = useI18n();
  const parts = path.split('/').filter(Boolean); // ['console', screen, ...rest]
  const screen = SCREENS.find((s) => s.id === parts[1]);
  let sub: string | undefined;
  try {
    sub = parts.length > 2 ? decodeURIComponent(parts.slice(2).join('/')) : undefined;
  } catch {
    sub = undefined;
  }
  const box = useRef<HTMLDivElement>(null);
  // /console alone opens the first screen
  useLayoutEffect(() => {
    if (!screen) navigate('/console/users', true);
  }, [screen]);
  useLayoutEffect(() => {
    if (screen) document.title = `${t(screen.label)} · ${t('nav.console')} · Portico`;
  }, [screen, t]);
  // the chunk's first screen: its heading takes the focus (the page's own effect ran before the chunk came)
  useLayoutEffect(() => {
    box.current?.querySelector<HTMLElement>('h1')?.focus();
  }, []);
  const Screen = screen?.component;
  return (
    <div class="console" ref={box}>
      <nav class="console-nav" aria-label={t('console.nav.label')}>
        {SCREENS.map((s) => (
          <a href={`/console/${s.id}`} id={`console-nav-${s.id}`} onClick={linkClick} aria-current={s === screen ? 'page' : undefined}>
            {t(s.label)}
          </a>
        ))}
      </nav>
      <div class="console-screen">{Screen && <Screen sub={sub} />}</div>
    </div>
  );
}
