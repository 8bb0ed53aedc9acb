import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { Dialog, ErrorBox, Field, Notice } from '../components/ui.js';
import { formatDate, formatNumber, useI18n } from '../i18n.js';
import { linkClick } from '../router.js';
import { admin, query, seg, type AdminKey, type BudgetRequest, type BudgetWithSpend, type Grant, type Paged } from './api.js';

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
  const cancel = useRef<HTMLButtonElement>(null);
  useLayoutEffect(() => setError(null), [props.open]);
  const run = async () => {
    setBusy(true);
    try {
      await props.onYes();
      props.onClose();
    } catch (e) {
      setError(e);
      // the pressed button is disabled while it runs, which sent the focus out of the dialog: it comes back to
      // Cancel, so the keyboard (Escape, Tab) is in the dialog that shows the error
      cancel.current?.focus();
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
        <button type="button" class="secondary" onClick={props.onClose} autoFocus ref={cancel}>
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
    <DataTable
      id={props.id}
      caption={t('console.common.keys')}
      hideCaption
      head={[
        t('keys.name'),
        t('console.common.kind'),
        props.showOwner ? t('console.common.owner') : t('keys.organization'),
        t('keys.status'),
        t('keys.lastUsed'),
        ...(props.onChange ? [t('keys.actions')] : []),
      ]}
    >
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
    </DataTable>
  );
}

/**
 * A form that changes something: a card with a heading, the fields given, the error or the outcome (what `run`
 * answers, a sentence) below them, and its submit button.
 */
export function ActionForm(props: { id: string; title: string; hint?: string; submit: string; run: () => Promise<string>; children: ComponentChildren }) {
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState('');
  const onSubmit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setDone('');
    try {
      setDone(await props.run());
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="card" id={props.id} onSubmit={onSubmit}>
      <h2>{props.title}</h2>
      {props.hint && <p class="hint">{props.hint}</p>}
      {props.children}
      <ErrorBox error={error} />
      {done && <Notice kind="ok">{done}</Notice>}
      <div class="buttons">
        <button type="submit" id={`${props.id}-submit`}>
          {props.submit}
        </button>
      </div>
    </form>
  );
}

/** Grants or removes credits of a user (personal) or an organization, with a note the audit log keeps. */
export function CreditsForm(props: { who: { user_id: string } | { org_id: string }; onDone: (g: Grant) => void }) {
  const f = useFormat();
  const { t } = f;
  const [way, setWay] = useState<'grant' | 'remove'>('grant');
  const [amount, setAmount] = useState('');
  const [note, setNote] = useState('');
  const run = async () => {
    const value = Number(amount);
    const g = await admin<Grant>('POST', '/credits', { ...props.who, amount: way === 'remove' ? -value : value, note });
    setAmount('');
    setNote('');
    props.onDone(g);
    return t(way === 'grant' ? 'console.credits.granted' : 'console.credits.removed', { amount: f.credits(value), balance: f.credits(g.balance.balance) });
  };
  return (
    <ActionForm id="credits-form" title={t('console.credits.title')} submit={t(way === 'grant' ? 'console.credits.grant' : 'console.credits.remove')} run={run}>
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
    </ActionForm>
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
      <DataTable
        id={props.id}
        caption={t('console.budgets.title')}
        hideCaption
        head={[
          ...(props.showTarget ? [t('console.budgets.target')] : []),
          t('console.budgets.periodLabel'),
          t('console.budgets.spent'),
          t('console.budgets.limit'),
          t('console.budgets.softLimit'),
          t('console.budgets.resets'),
          t('console.budgets.webhook'),
          t('keys.actions'),
        ]}
      >
        {props.budgets.map((b) => (
          <tr data-budget-id={b.id}>
            {props.showTarget && (
              <th scope="row" data-label={t('console.budgets.target')}>
                <span class="tag">{t(`console.budgets.scope.${b.scope}` as 'console.budgets.scope.key')}</span>{' '}
                {b.scope === 'user' ? <To href={userHref(b.target)}>{b.target}</To> : b.scope === 'org' ? <To href={orgHref(b.target)}>{b.target}</To> : <code>{b.target}</code>}
              </th>
            )}
            <td data-label={t('console.budgets.periodLabel')}>{t(`console.budgets.period.${b.period}` as 'console.budgets.period.daily')}</td>
            <td data-label={t('console.budgets.spent')}>
              <span class={b.spent >= b.limit ? 'over' : b.soft_limit !== null && b.spent >= b.soft_limit ? 'near' : undefined}>{f.credits(b.spent)}</span>
            </td>
            <td data-label={t('console.budgets.limit')}>{f.credits(b.limit)}</td>
            <td data-label={t('console.budgets.softLimit')}>{b.soft_limit === null ? <span class="muted">{t('console.common.none')}</span> : f.credits(b.soft_limit)}</td>
            <td data-label={t('console.budgets.resets')}>{f.when(b.resets_at)}</td>
            <td data-label={t('console.budgets.webhook')}>{b.webhook_url ? <code class="wrap">{b.webhook_url}</code> : <span class="muted">{t('console.common.none')}</span>}</td>
            <td class="actions" data-label={t('keys.actions')}>
              <button type="button" class="danger small" onClick={() => setRemoving(b)} aria-label={t('console.budgets.removeNamed', { name: name(b) })}>
                {t('console.budgets.remove')}
              </button>
            </td>
          </tr>
        ))}
      </DataTable>
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
  const run = async () => {
    const body: BudgetRequest = { scope, target: target.trim(), period, limit: Number(limit), soft_limit: soft === '' ? null : Number(soft), webhook_url: hook.trim() || null };
    await admin('POST', '/budgets', body);
    setLimit('');
    setSoft('');
    setHook('');
    props.onDone();
    return t('console.budgets.saved', { target: body.target, period: t(`console.budgets.period.${period}`) });
  };
  return (
    <ActionForm id="budget-form" title={t('console.budgets.setTitle')} hint={t('console.budgets.setHint')} submit={t('console.budgets.save')} run={run}>
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
    </ActionForm>
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

/** A table of the console: a caption (shown, or for screen readers only), a header row, the rows given. */
export function DataTable(props: { id: string; caption: string; hideCaption?: boolean; head: string[]; children: ComponentChildren }) {
  return (
    <div class="table-wrap">
      {/* class keys: on a phone each row is a card, each cell named by its column (as the page's list of keys) */}
      <table id={props.id} class="keys">
        <caption class={props.hideCaption ? 'visually-hidden' : undefined}>{props.caption}</caption>
        <thead>
          <tr>
            {props.head.map((h) => (
              <th scope="col">{h}</th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

interface Summary {
  keys: { total: number; active: number; disabled: number };
  balance: { balance: number };
  period: { requests: number; cost: number };
  last_activity: number;
}

/** the columns a user and an organization have alike in their lists: keys, balance, this month, last activity */
export function useSummaryColumns(): { head: string[]; cells: (s: Summary) => ComponentChildren } {
  const f = useFormat();
  const { t } = f;
  const head = [t('console.common.keys'), t('usage.balance'), t('console.common.thisMonth'), t('console.common.lastActivity')];
  return {
    head,
    cells: (s) => (
      <>
        <td data-label={head[0]}>{t('console.common.keyCounts', { total: f.n(s.keys.total), active: f.n(s.keys.active), disabled: f.n(s.keys.disabled) })}</td>
        <td data-label={head[1]}>{f.credits(s.balance.balance)}</td>
        <td data-label={head[2]}>
          {f.credits(s.period.cost)}
          <div class="muted">{t('console.common.requestsShort', { n: f.n(s.period.requests) })}</div>
        </td>
        <td data-label={head[3]}>{f.when(s.last_activity)}</td>
      </>
    ),
  };
}

/** A paged list searched by id (`GET /users`, `/orgs`): the search form, then what `children` makes of the page. */
export function SearchList<T>(props: { path: string; id: string; label: string; placeholder?: string; children: (page: Paged<T>, search: string) => ComponentChildren }) {
  const { t } = useI18n();
  const [search, setSearch] = useState('');
  const [applied, setApplied] = useState('');
  const [page, setPage] = useState(1);
  const perPage = 20;
  const { data, error } = useLoad(() => admin<Paged<T>>('GET', `${props.path}${query({ search: applied, page, per_page: perPage })}`), [applied, page]);
  return (
    <>
      <form
        class="toolbar"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied(search.trim());
          setPage(1);
        }}
      >
        <Field id={`${props.id}-search`} label={props.label}>
          <input id={`${props.id}-search`} type="search" maxLength={255} value={search} placeholder={props.placeholder} onInput={(e) => setSearch(e.currentTarget.value)} />
        </Field>
        <div class="buttons">
          <button type="submit">{t('console.common.find')}</button>
        </div>
      </form>
      <ErrorBox error={error} />
      {data && props.children(data, applied)}
      {data && <Pager id={`${props.id}-pager`} page={page} perPage={perPage} total={data.total} onPage={setPage} />}
    </>
  );
}
