import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { KEY_PATH, portal, type CreatedKeyRecord, type CreateKeyRequest, type KeyKind, type KeyList, type KeyRecord, type Me, type UpdateKeyRequest } from '../api.js';
import { formatDate, useI18n } from '../i18n.js';
import { Dialog, ErrorBox, Field, Notice } from '../components/ui.js';
import { navigate } from '../router.js';
import { rememberPlaygroundKey } from './Playground.js';

type Confirm = { action: 'revoke' | 'restore' | 'delete'; key: KeyRecord };

const PERSONAL = 'default';

/** Unix seconds at the end of a yyyy-mm-dd day, local time (the key works through that day). */
function endOfDay(date: string): number {
  const [y, m, d] = date.split('-').map(Number);
  return Math.floor(new Date(y, m - 1, d, 23, 59, 59).getTime() / 1000);
}

export function Keys({ me, reloadMe }: { me: Me | null; reloadMe: () => Promise<void> }) {
  const { t, lang } = useI18n();
  const [kind, setKind] = useState<KeyKind>('api_keys');
  const [search, setSearch] = useState('');
  const [query, setQuery] = useState('');
  const [status, setStatus] = useState('');
  const [org, setOrg] = useState('');
  const [page, setPage] = useState(1);
  const [perPage, setPerPage] = useState(20);
  const [data, setData] = useState<KeyList | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState('');
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<CreatedKeyRecord | null>(null);
  const [editing, setEditing] = useState<KeyRecord | null>(null);
  const [confirm, setConfirm] = useState<Confirm | null>(null);
  const tabs = useRef<HTMLDivElement>(null);

  // searching waits for a pause in typing
  useEffect(() => {
    const q = search.trim();
    // nothing to do unless the search changed (on the first render this would undo a page chosen in the first 250 ms)
    if (q === query) return;
    const h = setTimeout(() => {
      setQuery(q);
      setPage(1);
    }, 250);
    return () => clearTimeout(h);
  }, [search]);

  // the answer to the latest request wins: one that comes back after a newer one was sent is dropped
  const latest = useRef(0);
  const load = async () => {
    const mine = ++latest.current;
    const q = new URLSearchParams({ page: String(page), per_page: String(perPage) });
    if (status) q.set('status', status);
    if (org) q.set('org_id', org);
    if (query) q.set('search', query);
    try {
      const list = await portal<KeyList>('GET', `${KEY_PATH[kind]}?${q}`);
      if (mine !== latest.current) return;
      setData(list);
      setError(null);
    } catch (e) {
      if (mine === latest.current) setError(e);
    }
  };
  useEffect(() => {
    void load();
  }, [kind, query, status, org, page, perPage]);

  // the confirmation appears once the list shows the change
  const refresh = async (message: string) => {
    setDone('');
    await Promise.all([load(), reloadMe()]);
    setDone(message);
  };

  const summary = me?.[kind];
  const orgs = me ? [PERSONAL, ...Object.keys(me.org_roles).filter((o) => o !== PERSONAL)] : [PERSONAL];
  const orgName = (o: string) => (o === PERSONAL ? t('keys.personal') : o);
  const full = summary ? orgs.filter((o) => (summary.active[o] ?? 0) >= summary.limit) : [];
  const pages = data ? Math.max(1, Math.ceil(data.total / data.per_page)) : 1;

  const switchKind = (k: KeyKind) => {
    setKind(k);
    setPage(1);
    setDone('');
  };
  const onTabKey = (e: KeyboardEvent) => {
    if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
    const next: KeyKind = kind === 'api_keys' ? 'management_api_keys' : 'api_keys';
    switchKind(next);
    tabs.current?.querySelector<HTMLButtonElement>(`#tab-${next}`)?.focus();
  };

  return (
    <section>
      <div class="page-head">
        <h1 tabIndex={-1}>{t('keys.title')}</h1>
        <button type="button" id="create-key" onClick={() => setCreating(true)}>
          {kind === 'api_keys' ? t('keys.createInference') : t('keys.createManagement')}
        </button>
      </div>
      <div class="tabs" role="tablist" aria-label={t('keys.kinds')} ref={tabs} onKeyDown={onTabKey}>
        {(['api_keys', 'management_api_keys'] as KeyKind[]).map((k) => (
          <button type="button" role="tab" id={`tab-${k}`} aria-selected={kind === k} aria-controls="keys-panel" tabIndex={kind === k ? 0 : -1} onClick={() => switchKind(k)}>
            {k === 'api_keys' ? t('keys.inference') : t('keys.management')}
          </button>
        ))}
      </div>
      <div id="keys-panel" role="tabpanel" aria-labelledby={`tab-${kind}`}>
        <p class="hint">{kind === 'api_keys' ? t('keys.inferenceHint') : t('keys.managementHint')}</p>
        {summary && (
          <p class="limits" id="key-limits">
            {orgs
              .filter((o) => o === PERSONAL || summary.active[o] !== undefined || me!.admin_orgs.includes(o))
              .map((o) => t('keys.activeOf', { org: orgName(o), n: summary.active[o] ?? 0, limit: summary.limit }))
              .join(' · ')}
          </p>
        )}
        {full.length > 0 && <Notice kind="warn">{t('keys.limitReached', { org: full.map(orgName).join(', '), limit: summary!.limit })}</Notice>}
        {done && <Notice kind="ok">{done}</Notice>}
        <div class="toolbar">
          <Field id="key-search" label={t('keys.search')}>
            <input id="key-search" type="search" value={search} maxLength={100} placeholder={t('keys.searchPlaceholder')} onInput={(e) => setSearch(e.currentTarget.value)} />
          </Field>
          <Field id="key-status" label={t('keys.status')}>
            <select id="key-status" value={status} onChange={(e) => (setStatus(e.currentTarget.value), setPage(1))}>
              <option value="">{t('keys.statusAll')}</option>
              <option value="active">{t('status.active')}</option>
              <option value="revoked">{t('status.revoked')}</option>
              <option value="disabled">{t('status.disabled')}</option>
            </select>
          </Field>
          {orgs.length > 1 && (
            <Field id="key-org" label={t('keys.organization')}>
              <select id="key-org" value={org} onChange={(e) => (setOrg(e.currentTarget.value), setPage(1))}>
                <option value="">{t('keys.allOrgs')}</option>
                {orgs.map((o) => (
                  <option value={o}>{orgName(o)}</option>
                ))}
              </select>
            </Field>
          )}
        </div>
        <ErrorBox error={error} />
        {data && data.list.length === 0 && <p class="empty">{query || status || org ? t('keys.noMatch') : t('keys.none')}</p>}
        {data && data.list.length > 0 && (
          <div class="table-wrap">
            <table class="keys">
              <caption class="visually-hidden">{kind === 'api_keys' ? t('keys.inference') : t('keys.management')}</caption>
              <thead>
                <tr>
                  <th scope="col">{t('keys.name')}</th>
                  <th scope="col">{t('keys.key')}</th>
                  <th scope="col">{t('keys.status')}</th>
                  <th scope="col">{t('keys.scopes')}</th>
                  <th scope="col">{t('keys.lastUsed')}</th>
                  <th scope="col">{t('keys.expires')}</th>
                  <th scope="col">{t('keys.actions')}</th>
                </tr>
              </thead>
              <tbody>
                {data.list.map((k) => {
                  const expired = k.expires_at > 0 && k.expires_at * 1000 < Date.now();
                  return (
                    <tr data-key-id={k.id}>
                      <td data-label={t('keys.name')}>
                        <strong class="key-name">{k.name}</strong>
                        {k.org_id !== PERSONAL && <span class="tag">{k.org_id}</span>}
                        {k.description && <div class="muted">{k.description}</div>}
                      </td>
                      <td data-label={t('keys.key')}>
                        <code>{k.display}</code>
                      </td>
                      <td data-label={t('keys.status')}>
                        <span class={`badge ${expired ? 'expired' : k.status}`}>{expired ? t('status.expired') : t(`status.${k.status}`)}</span>
                      </td>
                      <td data-label={t('keys.scopes')}>{k.scopes.length ? k.scopes.join(', ') : <span class="muted">{t('keys.allScopes')}</span>}</td>
                      <td data-label={t('keys.lastUsed')}>{k.last_used_at ? formatDate(lang, k.last_used_at, true) : <span class="muted">{t('keys.never')}</span>}</td>
                      <td data-label={t('keys.expires')}>{k.expires_at ? formatDate(lang, k.expires_at) : <span class="muted">{t('keys.never')}</span>}</td>
                      <td data-label={t('keys.actions')} class="actions">
                        <button type="button" class="secondary small" onClick={() => setEditing(k)} aria-label={t('keys.editNamed', { name: k.name })}>
                          {t('keys.edit')}
                        </button>
                        {k.status === 'active' && (
                          <button
                            type="button"
                            class="secondary small"
                            onClick={() => setConfirm({ action: 'revoke', key: k })}
                            aria-label={t('keys.revokeNamed', { name: k.name })}
                          >
                            {t('keys.revoke')}
                          </button>
                        )}
                        {k.status === 'revoked' && (
                          <button
                            type="button"
                            class="secondary small"
                            onClick={() => setConfirm({ action: 'restore', key: k })}
                            aria-label={t('keys.restoreNamed', { name: k.name })}
                          >
                            {t('keys.restore')}
                          </button>
                        )}
                        <button type="button" class="danger small" onClick={() => setConfirm({ action: 'delete', key: k })} aria-label={t('keys.deleteNamed', { name: k.name })}>
                          {t('keys.delete')}
                        </button>
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
        {data && data.total > 0 && (
          <nav class="pager" aria-label={t('keys.pages')}>
            <button type="button" class="secondary small" disabled={page <= 1} onClick={() => setPage(page - 1)}>
              {t('keys.previous')}
            </button>
            <span aria-live="polite">{t('keys.pageOf', { page, pages, total: data.total })}</span>
            <button type="button" class="secondary small" disabled={page >= pages} onClick={() => setPage(page + 1)}>
              {t('keys.next')}
            </button>
            <label>
              {t('keys.perPage')}{' '}
              <select value={perPage} onChange={(e) => (setPerPage(Number(e.currentTarget.value)), setPage(1))}>
                {[10, 20, 50, 100].map((n) => (
                  <option value={n}>{n}</option>
                ))}
              </select>
            </label>
          </nav>
        )}
      </div>

      <CreateDialog
        open={creating}
        kind={kind}
        me={me}
        onClose={() => setCreating(false)}
        onCreated={(k) => {
          setCreating(false);
          setCreated(k);
          void refresh(t('keys.createdDone', { name: k.name }));
        }}
      />
      <CreatedDialog created={created} kind={kind} onClose={() => setCreated(null)} />
      <EditDialog
        editing={editing}
        kind={kind}
        onClose={() => setEditing(null)}
        onSaved={(k) => {
          setEditing(null);
          void refresh(t('keys.savedDone', { name: k.name }));
        }}
      />
      <ConfirmDialog
        confirm={confirm}
        kind={kind}
        onClose={() => setConfirm(null)}
        onDone={(msg) => {
          setConfirm(null);
          void refresh(msg);
        }}
      />
    </section>
  );
}

function CreateDialog(props: { open: boolean; kind: KeyKind; me: Me | null; onClose: () => void; onCreated: (k: CreatedKeyRecord) => void }) {
  const { t } = useI18n();
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [scopes, setScopes] = useState<string[]>([]);
  const [expires, setExpires] = useState('');
  const [org, setOrg] = useState(PERSONAL);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  // a layout effect (see EditDialog): the fields are emptied before any input can reach them, not after the next frame
  useLayoutEffect(() => {
    if (props.open) {
      setName('');
      setDescription('');
      setScopes([]);
      setExpires('');
      setOrg(PERSONAL);
      setError(null);
    }
  }, [props.open]);
  const me = props.me;
  const allowed = me?.[props.kind].scopes ?? [];
  const orgs = me ? Object.keys(me.org_roles).filter((o) => o !== PERSONAL) : [];
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body: CreateKeyRequest = { name, description, scopes };
      if (expires) body.expires_at = endOfDay(expires);
      if (org !== PERSONAL) body.org_id = org;
      props.onCreated(await portal<CreatedKeyRecord>('POST', KEY_PATH[props.kind], body));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <Dialog open={props.open} id="create-dialog" title={props.kind === 'api_keys' ? t('keys.createInference') : t('keys.createManagement')} onClose={props.onClose}>
      <form onSubmit={submit}>
        <Field id="new-name" label={t('keys.name')}>
          <input id="new-name" required maxLength={100} value={name} onInput={(e) => setName(e.currentTarget.value)} autoFocus />
        </Field>
        <Field id="new-description" label={t('keys.description')} hint={t('keys.descriptionHint')}>
          <textarea
            id="new-description"
            maxLength={500}
            rows={2}
            value={description}
            onInput={(e) => setDescription(e.currentTarget.value)}
            aria-describedby="new-description-hint"
          />
        </Field>
        <fieldset class="scopes">
          <legend>{t('keys.scopes')}</legend>
          <p class="hint">{t('keys.scopesHint')}</p>
          {allowed.map((s) => (
            <label class="check">
              <input type="checkbox" value={s} checked={scopes.includes(s)} onChange={(e) => setScopes(e.currentTarget.checked ? [...scopes, s] : scopes.filter((x) => x !== s))} />
              {s}
            </label>
          ))}
        </fieldset>
        <Field id="new-expires" label={t('keys.expiry')} hint={t('keys.expiryHint')}>
          <input id="new-expires" type="date" min={tomorrow} value={expires} onInput={(e) => setExpires(e.currentTarget.value)} aria-describedby="new-expires-hint" />
        </Field>
        {orgs.length > 0 && (
          <Field id="new-org" label={t('keys.organization')} hint={t('keys.orgHint')}>
            <select id="new-org" value={org} onChange={(e) => setOrg(e.currentTarget.value)} aria-describedby="new-org-hint">
              <option value={PERSONAL}>{t('keys.personal')}</option>
              {orgs.map((o) => (
                <option value={o} disabled={!me!.admin_orgs.includes(o)}>
                  {me!.admin_orgs.includes(o) ? o : t('keys.orgAdminsOnly', { org: o })}
                </option>
              ))}
            </select>
          </Field>
        )}
        <ErrorBox error={error} />
        <div class="buttons">
          <button type="submit" disabled={busy}>
            {t('keys.create')}
          </button>
          <button type="button" class="secondary" onClick={props.onClose}>
            {t('common.cancel')}
          </button>
        </div>
      </form>
    </Dialog>
  );
}

function CreatedDialog({ created, kind, onClose }: { created: CreatedKeyRecord | null; kind: KeyKind; onClose: () => void }) {
  const { t } = useI18n();
  const [copied, setCopied] = useState('');
  const input = useRef<HTMLInputElement>(null);
  useLayoutEffect(() => setCopied(''), [created]);
  const copy = async () => {
    const value = created!.api_key;
    try {
      await navigator.clipboard.writeText(value);
    } catch {
      // no clipboard permission: copy the selection the old way
      input.current?.select();
      document.execCommand('copy');
    }
    setCopied(t('keys.copied'));
  };
  return (
    <Dialog open={created !== null} id="created-dialog" title={t('keys.createdTitle')} onClose={onClose} wide>
      {created && (
        <>
          <Notice kind="warn">{t('keys.shownOnce')}</Notice>
          <Field id="created-key" label={t('keys.fullKey', { name: created.name })}>
            <div class="copy-row">
              <input id="created-key" ref={input} readOnly value={created.api_key} class="mono" onFocus={(e) => e.currentTarget.select()} />
              <button type="button" id="copy-key" onClick={copy}>
                {t('keys.copy')}
              </button>
            </div>
          </Field>
          <p class="status" role="status" aria-live="polite">
            {copied}
          </p>
          <div class="buttons">
            {kind === 'api_keys' && (
              <button
                type="button"
                class="secondary"
                id="use-in-playground"
                onClick={() => {
                  rememberPlaygroundKey({ id: created.id, name: created.name, key: created.api_key });
                  onClose();
                  navigate('/playground');
                }}
              >
                {t('keys.useInPlayground')}
              </button>
            )}
            <button type="button" onClick={onClose}>
              {t('keys.savedIt')}
            </button>
          </div>
        </>
      )}
    </Dialog>
  );
}

function EditDialog({ editing, kind, onClose, onSaved }: { editing: KeyRecord | null; kind: KeyKind; onClose: () => void; onSaved: (k: KeyRecord) => void }) {
  const { t } = useI18n();
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [error, setError] = useState<unknown>(null);
  // a layout effect, as the dialog's own opening is: the fields hold the key's values before any input can reach
  // them (with a plain effect, typing right after the dialog opened was overwritten by the old values)
  useLayoutEffect(() => {
    if (editing) {
      setName(editing.name);
      setDescription(editing.description);
      setError(null);
    }
  }, [editing]);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      onSaved(await portal<KeyRecord>('PUT', `${KEY_PATH[kind]}/${encodeURIComponent(editing!.id)}`, { name, description } satisfies UpdateKeyRequest));
    } catch (err) {
      setError(err);
    }
  };
  return (
    <Dialog open={editing !== null} id="edit-dialog" title={t('keys.editTitle')} onClose={onClose}>
      <form onSubmit={submit}>
        <Field id="edit-name" label={t('keys.name')}>
          <input id="edit-name" required maxLength={100} value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </Field>
        <Field id="edit-description" label={t('keys.description')}>
          <textarea id="edit-description" maxLength={500} rows={3} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
        </Field>
        <ErrorBox error={error} />
        <div class="buttons">
          <button type="submit">{t('common.save')}</button>
          <button type="button" class="secondary" onClick={onClose}>
            {t('common.cancel')}
          </button>
        </div>
      </form>
    </Dialog>
  );
}

function ConfirmDialog({ confirm, kind, onClose, onDone }: { confirm: Confirm | null; kind: KeyKind; onClose: () => void; onDone: (message: string) => void }) {
  const { t } = useI18n();
  const [error, setError] = useState<unknown>(null);
  useLayoutEffect(() => setError(null), [confirm]);
  if (!confirm) return <Dialog open={false} id="confirm-dialog" title="" onClose={onClose} children={null} />;
  const { action, key } = confirm;
  const run = async () => {
    try {
      if (action === 'delete') await portal('DELETE', `${KEY_PATH[kind]}/${encodeURIComponent(key.id)}`);
      else await portal('POST', `${KEY_PATH[kind]}/${action}`, { api_key_id: key.id });
      onDone(t(`keys.${action}Done`, { name: key.name }));
    } catch (err) {
      setError(err);
    }
  };
  return (
    <Dialog open id="confirm-dialog" title={t(`keys.${action}Title`, { name: key.name })} onClose={onClose}>
      <p>{t(`keys.${action}Text`)}</p>
      <ErrorBox error={error} />
      <div class="buttons">
        <button type="button" id="confirm-yes" class={action === 'restore' ? undefined : 'danger'} onClick={run}>
          {t(`keys.${action}`)}
        </button>
        <button type="button" class="secondary" onClick={onClose} autoFocus>
          {t('common.cancel')}
        </button>
      </div>
    </Dialog>
  );
}
