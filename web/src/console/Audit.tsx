import { useState } from 'preact/hooks';
import { ErrorBox, Field } from '../components/ui.js';
import type { Key } from '../i18n.js';
import { admin, query, type AuditEntry, type Paged } from './api.js';
import type { ScreenProps } from './Console.js';
import { DataTable, Pager, useFormat, useLoad } from './shared.js';

const PER_PAGE = 25;
const ACTIONS = ['credits.grant', 'credits.remove', 'key.disable', 'key.enable', 'operator.add', 'operator.remove', 'budget.set', 'budget.remove'];

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
/** the fields that differ between two records (with the name, to know which), or null: show them whole */
function changed(a: unknown, b: unknown): string[] | null {
  if (!isRecord(a) || !isRecord(b)) return null;
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
  if (keys.length === 0) return null;
  return ['name', ...keys.filter((k) => k !== 'name')].filter((k) => k in a || k in b);
}

/** a record before or after a change, as short lines (`field value`): only `fields` when given */
function Record({ value, fields }: { value: unknown; fields: string[] | null }) {
  const { t } = useFormat();
  if (value === null || value === undefined) return <span class="muted">{t('console.audit.nothing')}</span>;
  if (!isRecord(value)) return <code>{JSON.stringify(value)}</code>;
  const entries = fields ? fields.filter((k) => k in value).map((k) => [k, value[k]] as const) : Object.entries(value);
  return (
    <dl class="record">
      {entries.map(([k, v]) => (
        <>
          <dt>{k}</dt>
          <dd>{typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)}</dd>
        </>
      ))}
    </dl>
  );
}

/** Audit: who changed what, when, and the record before and after; filtered by who, what and on what. */
export function Audit(_props: ScreenProps) {
  const f = useFormat();
  const { t } = f;
  const [actor, setActor] = useState('');
  const [action, setAction] = useState('');
  const [target, setTarget] = useState('');
  const [applied, setApplied] = useState({ actor: '', action: '', target: '' });
  const [page, setPage] = useState(1);
  const { data, error } = useLoad(() => admin<Paged<AuditEntry>>('GET', `/audit${query({ ...applied, page, per_page: PER_PAGE })}`), [applied, page]);
  const actionName = (a: string) => (ACTIONS.includes(a) ? t(`console.audit.action.${a}` as Key) : a);
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.audit.title')}</h1>
      <form
        class="toolbar"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied({ actor: actor.trim(), action, target: target.trim() });
          setPage(1);
        }}
      >
        <Field id="audit-actor" label={t('console.audit.who')}>
          <input id="audit-actor" maxLength={255} value={actor} onInput={(e) => setActor(e.currentTarget.value)} />
        </Field>
        <Field id="audit-action" label={t('console.audit.what')}>
          <select id="audit-action" value={action} onChange={(e) => setAction(e.currentTarget.value)}>
            <option value="">{t('keys.statusAll')}</option>
            {ACTIONS.map((a) => (
              <option value={a}>{actionName(a)}</option>
            ))}
          </select>
        </Field>
        <Field id="audit-target" label={t('console.audit.target')}>
          <input id="audit-target" maxLength={300} value={target} onInput={(e) => setTarget(e.currentTarget.value)} />
        </Field>
        <div class="buttons">
          <button type="submit">{t('console.common.find')}</button>
        </div>
      </form>
      <ErrorBox error={error} />
      {data && data.list.length === 0 && <p class="empty">{t('console.audit.none')}</p>}
      {data && data.list.length > 0 && (
        <DataTable
          id="audit-table"
          caption={t('console.audit.count', { total: f.n(data.total) })}
          head={[t('console.audit.when'), t('console.audit.who'), t('console.audit.what'), t('console.audit.target'), t('console.audit.before'), t('console.audit.after')]}
        >
          {data.list.map((e) => {
            const fields = changed(e.before, e.after);
            return (
              <tr data-audit-id={e.id} data-action={e.action}>
                <td data-label={t('console.audit.when')}>{f.when(e.at)}</td>
                <td data-label={t('console.audit.who')}>
                  {e.actor === 'cli' ? t('console.audit.cli') : e.actor}
                  {e.actor_key_id && <div class="muted">{t('console.audit.withKey', { key: e.actor_key_id })}</div>}
                </td>
                <td data-label={t('console.audit.what')}>{actionName(e.action)}</td>
                <td data-label={t('console.audit.target')}>
                  <code class="wrap">{e.target}</code>
                </td>
                <td data-label={t('console.audit.before')}>
                  <Record value={e.before} fields={fields} />
                </td>
                <td data-label={t('console.audit.after')}>
                  <Record value={e.after} fields={fields} />
                </td>
              </tr>
            );
          })}
        </DataTable>
      )}
      {data && <Pager id="audit-pager" page={page} perPage={PER_PAGE} total={data.total} onPage={setPage} />}
    </section>
  );
}
