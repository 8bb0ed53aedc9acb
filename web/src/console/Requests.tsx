import { useState } from 'preact/hooks';
import { admin, query, seg, type AdminRequest as RequestRow, type AdminRequestDetail as RequestDetail, type AdminRequests as RequestList } from './api.js';
import { DataTable, Pager, useLoad } from './shared.js';
import type { ScreenProps } from './Console.js';
import { formatDate, formatNumber, useI18n, type Lang } from '../i18n.js';
import { Dialog, ErrorBox, Field } from '../components/ui.js';
import { navigate } from '../router.js';

interface Filters {
  user_id: string;
  key_id: string;
  model: string;
  deployment: string;
  status: '' | 'ok' | 'error';
  from: string;
  to: string;
  q: string;
}
const NO_FILTERS: Filters = { user_id: '', key_id: '', model: '', deployment: '', status: '', from: '', to: '', q: '' };
const TEXT_FILTERS = ['user_id', 'key_id', 'model', 'deployment', 'q'] as const;

/** a datetime-local value (the person's local time) as Unix seconds */
const unix = (local: string) => Math.floor(new Date(local).getTime() / 1000);

/** The query parameters of the filters: the list's and the CSV's (the same records). */
function filterParams(f: Filters): Record<string, string | number | undefined> {
  const p: Record<string, string | number | undefined> = Object.fromEntries(TEXT_FILTERS.map((k) => [k, f[k].trim()]));
  p.status = f.status;
  if (f.from) p.start_time = unix(f.from);
  if (f.to) p.end_time = unix(f.to);
  return p;
}
const PER_PAGE = 20;

/** answered without an error (a 200 whose stream ended in an error is one) */
const ok = (r: RequestRow) => r.status >= 200 && r.status < 400 && r.error === null;
const or = (v: string | null) => v ?? '—';

/** where one request opens (a link to it can be shared; Back closes it) */
const requestHref = (id: string) => `/console/requests/${seg(id)}`;

export function Requests({ sub }: ScreenProps) {
  const { t, lang } = useI18n();
  const [draft, setDraft] = useState<Filters>(NO_FILTERS);
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [page, setPage] = useState(1);
  // the request opened is the address's (/console/requests/<request id>)
  const opened = sub ?? null;
  const { data, error } = useLoad(() => admin<RequestList>('GET', `/requests${query({ ...filterParams(filters), page, per_page: PER_PAGE })}`), [filters, page]);

  // Show asks again even with the filters unchanged (a copy: the list reloads on a new filters object)
  const apply = (f: Filters) => {
    setDraft(f);
    setFilters({ ...f });
    setPage(1);
  };
  const set = (patch: Partial<Filters>) => setDraft((d) => ({ ...d, ...patch }));
  const csv = `/v1/admin/requests.csv${query(filterParams(filters))}`;
  const n = (x: number, d = 0) => formatNumber(lang, x, d);
  const filtered = JSON.stringify(filters) !== JSON.stringify(NO_FILTERS);

  return (
    <section class="console-requests">
      <div class="page-head">
        <h1 tabIndex={-1}>{t('console.requests.title')}</h1>
        <a class="button secondary-link" id="requests-csv" href={csv} download>
          {t('console.requests.csv')}
        </a>
      </div>
      <form
        class="toolbar"
        id="console-requests-filters"
        aria-label={t('console.requests.filters')}
        onSubmit={(e) => {
          e.preventDefault();
          apply(draft);
        }}
      >
        <Field id="rq-user" label={t('console.requests.user')}>
          <input id="rq-user" maxLength={255} value={draft.user_id} onInput={(e) => set({ user_id: e.currentTarget.value })} />
        </Field>
        <Field id="rq-key" label={t('console.requests.key')}>
          <input id="rq-key" maxLength={100} value={draft.key_id} onInput={(e) => set({ key_id: e.currentTarget.value })} />
        </Field>
        <Field id="rq-model" label={t('console.requests.model')}>
          <input id="rq-model" maxLength={200} value={draft.model} onInput={(e) => set({ model: e.currentTarget.value })} />
        </Field>
        <Field id="rq-deployment" label={t('console.requests.deployment')}>
          <input id="rq-deployment" maxLength={200} value={draft.deployment} onInput={(e) => set({ deployment: e.currentTarget.value })} />
        </Field>
        <Field id="rq-status" label={t('console.requests.status')}>
          <select id="rq-status" value={draft.status} onChange={(e) => set({ status: e.currentTarget.value as Filters['status'] })}>
            <option value="">{t('console.requests.statusAll')}</option>
            <option value="ok">{t('console.requests.statusOk')}</option>
            <option value="error">{t('console.requests.statusError')}</option>
          </select>
        </Field>
        <Field id="rq-from" label={t('console.requests.from')}>
          <input id="rq-from" type="datetime-local" value={draft.from} max={draft.to || undefined} onInput={(e) => set({ from: e.currentTarget.value })} />
        </Field>
        <Field id="rq-to" label={t('console.requests.to')}>
          <input id="rq-to" type="datetime-local" value={draft.to} min={draft.from || undefined} onInput={(e) => set({ to: e.currentTarget.value })} />
        </Field>
        <Field id="rq-q" label={t('console.requests.requestId')}>
          <input id="rq-q" type="search" maxLength={200} class="mono" value={draft.q} onInput={(e) => set({ q: e.currentTarget.value })} />
        </Field>
        <div class="buttons">
          <button type="submit" id="rq-apply">
            {t('console.requests.apply')}
          </button>
          <button type="button" class="secondary" disabled={!filtered && JSON.stringify(draft) === JSON.stringify(NO_FILTERS)} onClick={() => apply(NO_FILTERS)}>
            {t('console.requests.clear')}
          </button>
        </div>
      </form>
      <p class="hint">{t('console.requests.rangeHint')}</p>
      <ErrorBox error={error} />
      {data && data.list.length === 0 && <p class="empty">{filtered ? t('console.requests.noMatch') : t('console.requests.none')}</p>}
      {data && data.list.length > 0 && (
        <DataTable
          id="requests-table"
          caption={t('console.requests.title')}
          hideCaption
          head={[
            t('console.requests.time'),
            t('console.requests.requestId'),
            t('console.requests.user'),
            t('console.requests.model'),
            t('console.requests.status'),
            t('console.requests.latency'),
            t('console.requests.tokens'),
            t('console.requests.cost'),
          ]}
        >
          {data.list.map((r) => (
            <tr key={r.id} data-request-id={r.request_id}>
              <td data-label={t('console.requests.time')}>{formatDate(lang, r.created_at, true)}</td>
              <td data-label={t('console.requests.requestId')}>
                <button
                  type="button"
                  class="link mono request-id"
                  title={r.request_id}
                  onClick={() => navigate(requestHref(r.request_id), false, { keepFocus: true })}
                  aria-label={t('console.requests.open', { id: r.request_id })}
                >
                  {r.request_id}
                </button>
              </td>
              <td data-label={t('console.requests.user')}>
                {or(r.user_id)}
                <div class="muted mono key-id" title={r.key_id ?? undefined}>
                  {or(r.key_id)}
                </div>
              </td>
              <td data-label={t('console.requests.model')}>
                {or(r.model)}
                <div class="muted">
                  {r.deployment && `${r.deployment} · `}
                  {r.operation}
                </div>
              </td>
              <td data-label={t('console.requests.status')}>
                <StatusBadge row={r} />
                {r.error && <div class="muted">{r.error.code}</div>}
              </td>
              <td data-label={t('console.requests.latency')} class="num">
                {r.latency_ms === null ? '—' : t('console.health.ms', { n: n(r.latency_ms) })}
                {r.ttft_ms !== null && <div class="muted">{t('console.requests.ttftShort', { n: n(r.ttft_ms) })}</div>}
              </td>
              <td data-label={t('console.requests.tokens')} class="num">
                {n(r.input_tokens)} / {n(r.output_tokens)}
              </td>
              <td data-label={t('console.requests.cost')} class="num">
                {n(r.cost, 6)}
              </td>
            </tr>
          ))}
        </DataTable>
      )}
      {data && <Pager id="requests-pager" page={page} perPage={PER_PAGE} total={data.total} onPage={setPage} />}
      <RequestDialog id={opened} onClose={() => navigate('/console/requests', false, { keepFocus: true })} />
    </section>
  );
}

function StatusBadge({ row }: { row: RequestRow }) {
  const { t } = useI18n();
  return <span class={`badge ${ok(row) ? 'active' : 'revoked'}`}>{t(ok(row) ? 'console.requests.okStatus' : 'console.requests.errorStatus', { status: row.status })}</span>;
}

function RequestDialog({ id, onClose }: { id: string | null; onClose: () => void }) {
  const { t, lang } = useI18n();
  const loaded = useLoad(() => (id ? admin<RequestDetail>('GET', `/requests/${seg(id)}`) : Promise.resolve(null)), [id]);
  // the answer for this id (the one for the request opened before is not shown meanwhile)
  const detail = loaded.data?.request.request_id === id ? loaded.data : null;
  const error = id ? loaded.error : null;
  const n = (x: number, d = 0) => formatNumber(lang, x, d);
  const r = detail?.request;
  return (
    <Dialog open={id !== null} id="request-dialog" wide title={t('console.requests.detailTitle', { id: id ?? '' })} onClose={onClose}>
      <ErrorBox error={error} />
      {!detail && !error && <p class="loading">{t('common.loading')}</p>}
      {detail && r && (
        <>
          <dl class="facts">
            <dt>{t('console.requests.time')}</dt>
            <dd>{formatDate(lang, r.created_at, true)}</dd>
            <dt>{t('console.requests.status')}</dt>
            <dd>
              <StatusBadge row={r} />
              {r.error && (
                <span class="request-error">
                  {' '}
                  <code>{r.error.code}</code> {r.error.message}
                </span>
              )}
            </dd>
            <dt>{t('console.requests.user')}</dt>
            <dd>
              {or(r.user_id)} {r.org_id && <span class="muted">({r.org_id})</span>}
            </dd>
            <dt>{t('console.requests.key')}</dt>
            <dd class="mono">{or(r.key_id)}</dd>
            <dt>{t('console.requests.model')}</dt>
            <dd>
              {or(r.model)} · {or(r.deployment)} · {r.operation}
              {r.route && <div class="muted mono">{r.route}</div>}
            </dd>
            <dt>{t('console.requests.tokens')}</dt>
            <dd>{t('console.requests.tokensDetail', { input: n(r.input_tokens), output: n(r.output_tokens), cached: n(r.cached_tokens) })}</dd>
            <dt>{t('console.requests.cost')}</dt>
            <dd>{n(r.cost, 6)}</dd>
          </dl>
          <h3 class="small-head">{t('console.requests.timings')}</h3>
          <Timings timings={detail.timings} lang={lang} />
          {detail.response ? (
            <>
              <Items title={t('console.requests.input')} cls="request-input" items={detail.response.input} />
              <Items title={t('console.requests.output')} cls="request-output" items={detail.response.output} />
            </>
          ) : (
            <>
              <h3 class="small-head">{t('console.requests.inputOutput')}</h3>
              <p class="muted">{t('console.requests.notStored')}</p>
            </>
          )}
        </>
      )}
      <div class="buttons">
        <button type="button" class="secondary" onClick={onClose} autoFocus>
          {t('console.requests.close')}
        </button>
      </div>
    </Dialog>
  );
}

/** the text of a Responses item's content (a string, or its parts' text: input_text, output_text, refusal...) */
function textOf(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  const parts = content.map((p) => (p && typeof p === 'object' ? ((p as { text?: unknown; refusal?: unknown }).text ?? (p as { refusal?: unknown }).refusal) : undefined));
  return parts.every((x) => typeof x === 'string') ? parts.join('') : undefined;
}

/**
 * Stored items as they read: one line per message ("user: …", "assistant: …"); an item that is not a message of
 * text (a tool call, reasoning) as its JSON. The items as stored are one click away.
 */
function Items({ title, cls, items }: { title: string; cls: string; items: unknown }) {
  const { t } = useI18n();
  const list = typeof items === 'string' ? [{ role: 'user', content: items }] : Array.isArray(items) ? items : [items];
  return (
    <>
      <h3 class="small-head">{title}</h3>
      <ol class={`items ${cls}`}>
        {list.map((it) => {
          const o = (it && typeof it === 'object' ? it : {}) as { role?: unknown; type?: unknown; content?: unknown };
          const text = textOf(o.content);
          return text !== undefined && typeof o.role === 'string' ? (
            <li>
              <span class="who">{o.role}</span> <span class="text">{text}</span>
            </li>
          ) : (
            <li>
              <pre class="result">{JSON.stringify(it, null, 2)}</pre>
            </li>
          );
        })}
      </ol>
      <details>
        <summary>{t('console.requests.asStored')}</summary>
        <pre class="result">{JSON.stringify(items, null, 2)}</pre>
      </details>
    </>
  );
}

/** received → first output → end, as a bar (a picture: the figures are written beside it) */
function Timings({ timings, lang }: { timings: RequestDetail['timings']; lang: Lang }) {
  const { t } = useI18n();
  // the end is unknown for a request still under way (or one the log has no line of): the bar ends at what is known
  const end = timings.total_ms ?? timings.first_output_ms ?? 0;
  const total = Math.max(1, end);
  const first = timings.first_output_ms === null ? null : Math.min(total, Math.max(0, timings.first_output_ms));
  const x = (v: number) => (v / total) * 100;
  const ms = (v: number) => t('console.health.ms', { n: formatNumber(lang, v) });
  return (
    <div class="timings" id="request-timings">
      <svg
        class={`timing-bar${timings.total_ms === null ? ' open-ended' : ''}`}
        width="100%"
        height="14"
        viewBox="0 0 100 14"
        preserveAspectRatio="none"
        aria-hidden="true"
        focusable="false"
      >
        <rect class="waiting" x="0" y="0" width={first === null ? 100 : x(first)} height="14" />
        {first !== null && <rect class="streaming" x={x(first)} y="0" width={100 - x(first)} height="14" />}
      </svg>
      <ol class="timing-steps">
        <li>
          <span class="swatch waiting" aria-hidden="true" /> {t('console.requests.received')}:{' '}
          {new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', { timeStyle: 'medium' }).format(new Date(timings.received_at_ms))}
        </li>
        <li>
          <span class="swatch streaming" aria-hidden="true" /> {t('console.requests.firstOutput')}: {first === null ? t('console.requests.noOutput') : `+${ms(first)}`}
        </li>
        <li>
          {t('console.requests.end')}: {timings.total_ms === null ? t('console.requests.noEnd') : `+${ms(timings.total_ms)}`}
        </li>
        {timings.engine_ms !== null && (
          <li class="muted">
            {t('console.requests.engine')}: {ms(timings.engine_ms)}
          </li>
        )}
      </ol>
    </div>
  );
}
