import { useState } from 'preact/hooks';
import { ErrorBox, Field, Notice } from '../components/ui.js';
import { admin, query, seg, type AdminKey, type AdminUser, type AdminUserDetail, type BudgetWithSpend, type KeyChange, type Paged } from './api.js';
import type { ScreenProps } from './Console.js';
import { BudgetForm, BudgetTable, Confirm, CreditsForm, Figures, KeyTable, Pager, To, orgHref, useFormat, useLoad, userHref } from './shared.js';

const PER_PAGE = 20;

/** Users: search and list (/console/users), or one user (/console/users/<id>). */
export function Users({ sub }: ScreenProps) {
  return sub ? <User id={sub} /> : <UserList />;
}

function UserList() {
  const f = useFormat();
  const { t } = f;
  const [search, setSearch] = useState('');
  const [applied, setApplied] = useState('');
  const [page, setPage] = useState(1);
  const { data, error } = useLoad(() => admin<Paged<AdminUser>>('GET', `/users${query({ search: applied, page, per_page: PER_PAGE })}`), [applied, page]);
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.users.title')}</h1>
      <form
        class="toolbar"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied(search.trim());
          setPage(1);
        }}
      >
        <Field id="users-search" label={t('console.users.search')}>
          <input
            id="users-search"
            type="search"
            maxLength={255}
            value={search}
            placeholder={t('console.users.searchPlaceholder')}
            onInput={(e) => setSearch(e.currentTarget.value)}
          />
        </Field>
        <div class="buttons">
          <button type="submit">{t('console.common.find')}</button>
        </div>
      </form>
      <ErrorBox error={error} />
      {data && data.list.length === 0 && <p class="empty">{applied ? t('console.users.noMatch', { search: applied }) : t('console.users.none')}</p>}
      {data && data.list.length > 0 && (
        <div class="table-wrap">
          <table id="users-table">
            <caption>{t('console.users.count', { total: f.n(data.total) })}</caption>
            <thead>
              <tr>
                <th scope="col">{t('console.users.user')}</th>
                <th scope="col">{t('console.common.keys')}</th>
                <th scope="col">{t('usage.balance')}</th>
                <th scope="col">{t('console.common.thisMonth')}</th>
                <th scope="col">{t('console.common.lastActivity')}</th>
              </tr>
            </thead>
            <tbody>
              {data.list.map((u) => (
                <tr data-user-id={u.user_id}>
                  <th scope="row" data-label={t('console.users.user')}>
                    <To href={userHref(u.user_id)}>{u.user_id}</To>
                    {u.operator && <span class="tag">{t('console.users.operator')}</span>}
                  </th>
                  <td data-label={t('console.common.keys')}>
                    {t('console.common.keyCounts', { total: f.n(u.keys.total), active: f.n(u.keys.active), disabled: f.n(u.keys.disabled) })}
                  </td>
                  <td data-label={t('usage.balance')}>{f.credits(u.balance.balance)}</td>
                  <td data-label={t('console.common.thisMonth')}>
                    {f.credits(u.period.cost)}
                    <div class="muted">{t('console.common.requestsShort', { n: f.n(u.period.requests) })}</div>
                  </td>
                  <td data-label={t('console.common.lastActivity')}>{f.when(u.last_activity)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {data && <Pager id="users-pager" page={page} perPage={PER_PAGE} total={data.total} onPage={setPage} />}
    </section>
  );
}

function User({ id }: { id: string }) {
  const f = useFormat();
  const { t } = f;
  const user = useLoad(() => admin<AdminUserDetail>('GET', `/users/${seg(id)}`), [id]);
  const budgets = useLoad(() => admin<{ list: BudgetWithSpend[] }>('GET', '/budgets'), [id]);
  const [notice, setNotice] = useState('');
  const [failed, setFailed] = useState<KeyChange['failed']>([]);
  const [error, setError] = useState<unknown>(null);
  const [all, setAll] = useState<'disable' | 'enable' | null>(null);
  const u = user.data;
  const keyIds = new Set(u?.api_keys.map((k) => k.id));
  const mine = (budgets.data?.list ?? []).filter((b) => (b.scope === 'user' && b.target === id) || (b.scope === 'key' && keyIds.has(b.target)));

  const change = async (disable: boolean, key?: AdminKey) => {
    setError(null);
    setNotice('');
    setFailed([]);
    const r = await admin<KeyChange>('POST', `/users/${seg(id)}/keys/${disable ? 'disable' : 'enable'}`, key ? { api_key_id: key.id } : {});
    setFailed(r.failed);
    setNotice(
      key
        ? t(disable ? 'console.users.disabledOne' : 'console.users.enabledOne', { name: key.name })
        : t(disable ? 'console.users.disabledAll' : 'console.users.enabledAll', { n: f.n(r.api_keys.length) }),
    );
    await user.reload();
  };
  const changeOne = (key: AdminKey, disable: boolean) => change(disable, key).catch(setError);

  return (
    <section>
      <p class="crumb">
        <To href="/console/users">{t('console.users.back')}</To>
      </p>
      <h1 tabIndex={-1}>{t('console.users.one', { user: id })}</h1>
      <ErrorBox error={user.error} />
      {u && (
        <>
          <Figures balance={u.balance} period={u.period}>
            <div class="stat">
              <span class="label">{t('console.common.lastActivity')}</span>
              <span class="value small-value">{f.when(u.last_activity)}</span>
              <span class="muted">
                {u.operator ? t('console.users.isOperator') : t('console.users.notOperator')}
                {u.admin_orgs.length > 0 && (
                  <>
                    {' · '}
                    {t('console.users.adminOf')}{' '}
                    {u.admin_orgs.map((o, i) => (
                      <>
                        {i > 0 && ', '}
                        <To href={orgHref(o)}>{o}</To>
                      </>
                    ))}
                  </>
                )}
              </span>
            </div>
          </Figures>
          <section class="card" aria-labelledby="user-keys-title">
            <div class="page-head">
              <h2 id="user-keys-title">{t('console.users.keysTitle', { n: f.n(u.api_keys.length) })}</h2>
              <div class="buttons">
                {u.keys.active > 0 && (
                  <button type="button" class="danger small" id="disable-all" onClick={() => setAll('disable')}>
                    {t('console.users.disableAll')}
                  </button>
                )}
                {u.keys.disabled > 0 && (
                  <button type="button" class="secondary small" id="enable-all" onClick={() => setAll('enable')}>
                    {t('console.users.enableAll')}
                  </button>
                )}
              </div>
            </div>
            <p class="hint">{t('console.users.disableHint')}</p>
            <ErrorBox error={error} />
            {notice && <Notice kind="ok">{notice}</Notice>}
            {failed.length > 0 && (
              <Notice kind="warn">
                {t('console.users.failed')}
                <ul>
                  {failed.map((x) => (
                    <li>
                      <code>{x.id}</code>: {x.message}
                    </li>
                  ))}
                </ul>
              </Notice>
            )}
            <KeyTable id="user-keys" keys={u.api_keys} onChange={changeOne} />
          </section>
          <CreditsForm who={{ user_id: id }} onDone={() => void user.reload()} />
          <section class="card" aria-labelledby="user-budgets-title">
            <h2 id="user-budgets-title">{t('console.users.budgetsTitle')}</h2>
            <ErrorBox error={budgets.error} />
            <BudgetTable id="user-budgets" budgets={mine} showTarget onRemoved={() => void budgets.reload()} />
          </section>
          <BudgetForm scope="user" target={id} fixed onDone={() => void budgets.reload()} />
        </>
      )}
      <Confirm
        open={all !== null}
        id="keys-all"
        title={all === 'disable' ? t('console.users.disableAllTitle', { user: id }) : t('console.users.enableAllTitle', { user: id })}
        text={all === 'disable' ? t('console.users.disableAllText') : t('console.users.enableAllText')}
        yes={all === 'disable' ? t('console.users.disableAll') : t('console.users.enableAll')}
        danger={all === 'disable'}
        onClose={() => setAll(null)}
        onYes={() => change(all === 'disable')}
      />
    </section>
  );
}
