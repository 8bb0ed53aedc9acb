import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { Dialog, ErrorBox, Field, Notice } from '../components/ui.js';
import { formatDate, formatNumber, useI18n } from '../i18n.js';
import { linkClick } from '../router.js';
import { admin, seg, type AdminKey, type BudgetRequest, type BudgetWithSpend, type Grant } from './api.js';

/**
 * Loads what a screen shows: the answer to the latest call wins (one that comes back after a newer one was sent is
 * dropped); `reload` calls again with the same arguments.
 */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | null; error: unknown; reload: () => Promise<void> } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const latest = useRef(0);
  const current = useRef(load);
  current.current = load;
  const reload = async () => {
    const mine = ++latest.current;
    try {
      const d = await current.current();
      if (mine !== latest.current) return;
      setData(d);
      setError(null);
    } catch (e) {
      if (mine === latest.current) setError(e);
    }
  };
  useEffect(() => {
    void reload();
  }, deps);
  return { data, error, reload };
}

/** credits with the ledger's precision, in the person's number format */
export function useFormat() {
  const { lang, t } = useI18n();
  return {
    lang,
    t,
    n: (x: number, digits = 0) => formatNumber(lang, x, digits),
    credits: (x: number) => formatNumber(lang, x, 4),
    when: (unix: number) => (unix ? formatDate(lang, unix, true) : t('console.common.never')),
  };
}

/** previous / next through a paged list */
export function Pager(props: { id: string; page: number; perPage: number; total: number; onPage: (page: number) => void }) {
  const { t } = useI18n();
  const pages = Math.max(1, Math.ceil(props.total / props.perPage));
  if (props.total <= props.perPage && props.page === 1) return null;
  return (
    <nav class="pager" id={props.id} aria-label={t('keys.pages')}>
      <button type="button" class="secondary small" disabled={props.page <= 1} onClick={() => props.onPage(props.page - 1)}>
        {t('keys.previous')}
      </button>
      <span aria-live="polite">{t('console.common.pageOf', { page: props.page, pages, total: props.total })}</span>
      <button type="button" class="secondary small" disabled={props.page >= pages} onClick={() => props.onPage(props.page + 1)}>
        {t('keys.next')}
      </button>
    </nav>
  );
}

/** a link inside the console */
export function To(props: { href: string; children: ComponentChildren; label?: string }) {
  return (
    <a href={props.href} onClick={linkClick} aria-label={props.label}>
      {props.children}
    </a>
  );
}

export const userHref = (id: string) => `/console/users/${seg(id)}`;
export const orgHref = (id: string) => `/console/orgs/${seg(id)}`;

/** A confirmation before a change that is hard to take back; it starts on Cancel. */
export function Confirm(props: { open: boolean; id: string; title: string; text: string; yes: string; danger?: boolean; onYes: () => Promise<void>; onClose: () => void }) {
  const { t } = useI18n();
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useLayoutEffect(() => setError(null), [props.open]);
  const run = async () => {
    setBusy(true);
    try {
      await props.onYes();
      props.onClose();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <Dialog open={props.open} id={props.id} title={props.title} onClose={props.onClose}>
      <p>{props.text}</p>
      <ErrorBox error={error} />
      <div class="buttons">
        <button type="button" id={`${props.id}-yes`} class={props.danger ? 'danger' : undefined} disabled={busy} onClick={run}>
          {props.yes}
        </button>
        <button type="button" class="secondary" onClick={props.onClose} autoFocus>
          {t('common.cancel')}
        </button>
      </div>
    </Dialog>
  );
}

/** A key's state as a badge (a deleted key shows as such) */
export function KeyStatus({ status }: { status: string }) {
  const { t } = useI18n();
  const known = ['active', 'revoked', 'disabled', 'expired'].includes(status);
  return <span class={`badge ${status}`}>{known ? t(`status.${status}` as 'status.active') : status === 'deleted' ? t('usage.deleted') : status}</span>;
}

/**
 * Keys as an operator sees them: kind, name, organization or owner, state, last use; with `onChange`, a button to
 * disable an active key or enable a disabled one.
 */
export function KeyTable(props: { id: string; keys: AdminKey[]; showOwner?: boolean; onChange?: (key: AdminKey, disable: boolean) => void }) {
  const f = useFormat();
  const { t } = f;
  if (props.keys.length === 0) return <p class="empty">{t('console.common.noKeys')}</p>;
  return (
    <div class="table-wrap">
      <table id={props.id}>
        <caption class="visually-hidden">{t('console.common.keys')}</caption>
        <thead>
          <tr>
            <th scope="col">{t('keys.name')}</th>
            <th scope="col">{t('console.common.kind')}</th>
            <th scope="col">{props.showOwner ? t('console.common.owner') : t('keys.organization')}</th>
            <th scope="col">{t('keys.status')}</th>
            <th scope="col">{t('keys.lastUsed')}</th>
            {props.onChange && <th scope="col">{t('keys.actions')}</th>}
          </tr>
        </thead>
        <tbody>
          {props.keys.map((k) => (
            <tr data-key-id={k.id}>
              <th scope="row" data-label={t('keys.name')}>
                <span class="key-name">{k.name}</span>
                <div class="muted">
                  <code>{k.display}</code>
                </div>
              </th>
              <td data-label={t('console.common.kind')}>{k.kind === 'management' ? t('console.common.management') : t('console.common.inference')}</td>
              <td data-label={props.showOwner ? t('console.common.owner') : t('keys.organization')}>
                {props.showOwner ? <To href={userHref(k.user_id)}>{k.user_id}</To> : k.org_id === 'default' ? t('keys.personal') : <To href={orgHref(k.org_id)}>{k.org_id}</To>}
              </td>
              <td data-label={t('keys.status')}>
                <KeyStatus status={k.status} />
              </td>
              <td data-label={t('keys.lastUsed')}>{k.last_used_at ? f.when(k.last_used_at) : <span class="muted">{t('keys.never')}</span>}</td>
              {props.onChange && (
                <td class="actions" data-label={t('keys.actions')}>
                  {k.status === 'active' && (
                    <button type="button" class="secondary small" onClick={() => props.onChange!(k, true)} aria-label={t('console.users.disableNamed', { name: k.name })}>
                      {t('console.users.disable')}
                    </button>
                  )}
                  {k.status === 'disabled' && (
                    <button type="button" class="secondary small" onClick={() => props.onChange!(k, false)} aria-label={t('console.users.enableNamed', { name: k.name })}>
                      {t('console.users.enable')}
                    </button>
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** Grants or removes credits of a user (personal) or an organization, with a note the audit log keeps. */
export function CreditsForm(props: { who: { user_id: string } | { org_id: string }; onDone: (g: Grant) => void }) {
  const f = useFormat();
  const { t } = f;
  const [way, setWay] = useState<'grant' | 'remove'>('grant');
  const [amount, setAmount] = useState('');
  const [note, setNote] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState('');
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setDone('');
    const value = Number(amount);
    try {
      const g = await admin<Grant>('POST', '/credits', { ...props.who, amount: way === 'remove' ? -value : value, note });
      setDone(t(way === 'grant' ? 'console.credits.granted' : 'console.credits.removed', { amount: f.credits(value), balance: f.credits(g.balance.balance) }));
      setAmount('');
      setNote('');
      props.onDone(g);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="card credits-form" id="credits-form" onSubmit={submit}>
      <h2>{t('console.credits.title')}</h2>
      <fieldset class="split">
        <legend>{t('console.credits.way')}</legend>
        {(['grant', 'remove'] as const).map((w) => (
          <label>
            <input type="radio" name="credits-way" value={w} checked={way === w} onChange={() => setWay(w)} />
            {t(w === 'grant' ? 'console.credits.grant' : 'console.credits.remove')}
          </label>
        ))}
      </fieldset>
      <div class="row">
        <Field id="credits-amount" label={t('console.credits.amount')} hint={t('console.credits.amountHint')}>
          <input
            id="credits-amount"
            type="number"
            min="0.000001"
            step="any"
            required
            value={amount}
            aria-describedby="credits-amount-hint"
            onInput={(e) => setAmount(e.currentTarget.value)}
          />
        </Field>
        <Field id="credits-note" label={t('console.credits.note')} hint={t('console.credits.noteHint')}>
          <input id="credits-note" maxLength={500} value={note} aria-describedby="credits-note-hint" onInput={(e) => setNote(e.currentTarget.value)} />
        </Field>
      </div>
      <ErrorBox error={error} />
      {done && <Notice kind="ok">{done}</Notice>}
      <div class="buttons">
        <button type="submit" id="credits-submit">
          {t(way === 'grant' ? 'console.credits.grant' : 'console.credits.remove')}
        </button>
      </div>
    </form>
  );
}

/** The budgets of one target (or every budget): what is spent, the limits, when it resets; remove with confirmation. */
export function BudgetTable(props: { id: string; budgets: BudgetWithSpend[]; onRemoved: () => void; showTarget?: boolean }) {
  const f = useFormat();
  const { t } = f;
  const [removing, setRemoving] = useState<BudgetWithSpend | null>(null);
  if (props.budgets.length === 0) return <p class="empty">{t('console.budgets.none')}</p>;
  const name = (b: BudgetWithSpend) =>
    `${t(`console.budgets.scope.${b.scope}` as 'console.budgets.scope.key')} ${b.target} · ${t(`console.budgets.period.${b.period}` as 'console.budgets.period.daily')}`;
  return (
    <>
      <div class="table-wrap">
        <table id={props.id}>
          <caption class="visually-hidden">{t('console.budgets.title')}</caption>
          <thead>
            <tr>
              {props.showTarget && <th scope="col">{t('console.budgets.target')}</th>}
              <th scope="col">{t('console.budgets.periodLabel')}</th>
              <th scope="col">{t('console.budgets.spent')}</th>
              <th scope="col">{t('console.budgets.limit')}</th>
              <th scope="col">{t('console.budgets.softLimit')}</th>
              <th scope="col">{t('console.budgets.resets')}</th>
              <th scope="col">{t('console.budgets.webhook')}</th>
              <th scope="col">{t('keys.actions')}</th>
            </tr>
          </thead>
          <tbody>
            {props.budgets.map((b) => (
              <tr data-budget-id={b.id}>
                {props.showTarget && (
                  <th scope="row" data-label={t('console.budgets.target')}>
                    <span class="tag">{t(`console.budgets.scope.${b.scope}` as 'console.budgets.scope.key')}</span>{' '}
                    {b.scope === 'user' ? (
                      <To href={userHref(b.target)}>{b.target}</To>
                    ) : b.scope === 'org' ? (
                      <To href={orgHref(b.target)}>{b.target}</To>
                    ) : (
                      <code>{b.target}</code>
                    )}
                  </th>
                )}
                <td data-label={t('console.budgets.periodLabel')}>{t(`console.budgets.period.${b.period}` as 'console.budgets.period.daily')}</td>
                <td data-label={t('console.budgets.spent')}>
                  <span class={b.spent >= b.limit ? 'over' : b.soft_limit !== null && b.spent >= b.soft_limit ? 'near' : undefined}>{f.credits(b.spent)}</span>
                </td>
                <td data-label={t('console.budgets.limit')}>{f.credits(b.limit)}</td>
                <td data-label={t('console.budgets.softLimit')}>{b.soft_limit === null ? <span class="muted">{t('console.common.none')}</span> : f.credits(b.soft_limit)}</td>
                <td data-label={t('console.budgets.resets')}>{f.when(b.resets_at)}</td>
                <td data-label={t('console.budgets.webhook')}>
                  {b.webhook_url ? <code class="wrap">{b.webhook_url}</code> : <span class="muted">{t('console.common.none')}</span>}
                </td>
                <td class="actions" data-label={t('keys.actions')}>
                  <button type="button" class="danger small" onClick={() => setRemoving(b)} aria-label={t('console.budgets.removeNamed', { name: name(b) })}>
                    {t('console.budgets.remove')}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Confirm
        open={removing !== null}
        id="budget-remove"
        title={removing ? t('console.budgets.removeTitle', { name: name(removing) }) : ''}
        text={t('console.budgets.removeText')}
        yes={t('console.budgets.remove')}
        danger
        onClose={() => setRemoving(null)}
        onYes={async () => {
          await admin('DELETE', `/budgets/${seg(removing!.id)}`);
          props.onRemoved();
        }}
      />
    </>
  );
}

/** Sets (makes or replaces) a budget: one per scope, target and period. */
export function BudgetForm(props: { scope?: BudgetRequest['scope']; target?: string; fixed?: boolean; onDone: () => void }) {
  const f = useFormat();
  const { t } = f;
  const [scope, setScope] = useState<BudgetRequest['scope']>(props.scope ?? 'user');
  const [target, setTarget] = useState(props.target ?? '');
  const [period, setPeriod] = useState<BudgetRequest['period']>('monthly');
  const [limit, setLimit] = useState('');
  const [soft, setSoft] = useState('');
  const [hook, setHook] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState('');
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setDone('');
    const body: BudgetRequest = { scope, target: target.trim(), period, limit: Number(limit), soft_limit: soft === '' ? null : Number(soft), webhook_url: hook.trim() || null };
    try {
      await admin('POST', '/budgets', body);
      setDone(t('console.budgets.saved', { target: body.target, period: t(`console.budgets.period.${period}`) }));
      setLimit('');
      setSoft('');
      setHook('');
      props.onDone();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="card" id="budget-form" onSubmit={submit}>
      <h2>{t('console.budgets.setTitle')}</h2>
      <p class="hint">{t('console.budgets.setHint')}</p>
      <div class="row">
        {!props.fixed && (
          <>
            <Field id="budget-scope" label={t('console.budgets.scopeLabel')}>
              <select id="budget-scope" value={scope} onChange={(e) => setScope(e.currentTarget.value as BudgetRequest['scope'])}>
                {(['key', 'user', 'org'] as const).map((s) => (
                  <option value={s}>{t(`console.budgets.scope.${s}`)}</option>
                ))}
              </select>
            </Field>
            <Field id="budget-target" label={t('console.budgets.target')} hint={t(`console.budgets.targetHint.${scope}`)}>
              <input id="budget-target" required maxLength={255} value={target} aria-describedby="budget-target-hint" onInput={(e) => setTarget(e.currentTarget.value)} />
            </Field>
          </>
        )}
        <Field id="budget-period" label={t('console.budgets.periodLabel')}>
          <select id="budget-period" value={period} onChange={(e) => setPeriod(e.currentTarget.value as BudgetRequest['period'])}>
            {(['daily', 'weekly', 'monthly'] as const).map((p) => (
              <option value={p}>{t(`console.budgets.period.${p}`)}</option>
            ))}
          </select>
        </Field>
        <Field id="budget-limit" label={t('console.budgets.limit')}>
          <input id="budget-limit" type="number" min="0.000001" step="any" required value={limit} onInput={(e) => setLimit(e.currentTarget.value)} />
        </Field>
        <Field id="budget-soft" label={t('console.budgets.softLimit')} hint={t('console.budgets.softHint')}>
          <input id="budget-soft" type="number" min="0" step="any" value={soft} aria-describedby="budget-soft-hint" onInput={(e) => setSoft(e.currentTarget.value)} />
        </Field>
        <Field id="budget-webhook" label={t('console.budgets.webhook')} hint={t('console.budgets.webhookHint')}>
          <input
            id="budget-webhook"
            type="url"
            maxLength={2000}
            value={hook}
            placeholder="https://"
            aria-describedby="budget-webhook-hint"
            onInput={(e) => setHook(e.currentTarget.value)}
          />
        </Field>
      </div>
      <ErrorBox error={error} />
      {done && <Notice kind="ok">{done}</Notice>}
      <div class="buttons">
        <button type="submit" id="budget-save">
          {t('console.budgets.save')}
        </button>
      </div>
    </form>
  );
}

/** A screen's figures as cards: balance and usage this month */
export function Figures(props: {
  balance: { granted: number; used: number; balance: number };
  period: { requests: number; tokens: number; cost: number };
  children?: ComponentChildren;
}) {
  const f = useFormat();
  const { t } = f;
  return (
    <div class="cards" id="figures">
      <div class="stat">
        <span class="label">{t('usage.balance')}</span>
        <span class="value" id="figure-balance">
          {f.credits(props.balance.balance)}
        </span>
        <span class="muted">{t('usage.granted', { granted: f.credits(props.balance.granted), used: f.credits(props.balance.used) })}</span>
      </div>
      <div class="stat">
        <span class="label">{t('console.common.thisMonth')}</span>
        <span class="value">{f.credits(props.period.cost)}</span>
        <span class="muted">{t('console.common.requestsTokens', { requests: f.n(props.period.requests), tokens: f.n(props.period.tokens) })}</span>
      </div>
      {props.children}
    </div>
  );
}
