import { useState } from 'preact/hooks';
import { ErrorBox, Notice } from '../components/ui.js';
import { admin, seg, type AdminKey, type AdminUser, type AdminUserDetail, type BudgetWithSpend, type KeyChange } from './api.js';
import type { ScreenProps } from './Console.js';
import { BudgetForm, BudgetTable, Confirm, CreditsForm, DataTable, Figures, KeyTable, SearchList, To, orgHref, useFormat, useLoad, useSummaryColumns, userHref } from './shared.js';

/** Users: search and list (/console/users), or one user (/console/users/<id>). */
export function Users({ sub }: ScreenProps) {
  return sub ? <User id={sub} /> : <UserList />;
}

function UserList() {
  const f = useFormat();
  const { t } = f;
  const summary = useSummaryColumns();
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.users.title')}</h1>
      <SearchList<AdminUser> path="/users" id="users" label={t('console.users.search')} placeholder={t('console.users.searchPlaceholder')}>
        {(data, search) =>
          data.list.length === 0 ? (
            <p class="empty">{search ? t('console.users.noMatch', { search }) : t('console.users.none')}</p>
          ) : (
            <DataTable id="users-table" caption={t('console.users.count', { total: f.n(data.total) })} head={[t('console.users.user'), ...summary.head]}>
              {data.list.map((u) => (
                <tr data-user-id={u.user_id}>
                  <th scope="row" data-label={t('console.users.user')}>
                    <To href={userHref(u.user_id)}>{u.user_id}</To>
                    {u.operator && <span class="tag">{t('console.users.operator')}</span>}
                  </th>
                  {summary.cells(u)}
                </tr>
              ))}
            </DataTable>
          )
        }
      </SearchList>
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
    // the list first, then the sentence: what the sentence says is on the screen when it is read
    await user.reload();
    setFailed(r.failed);
    setNotice(
      key
        ? t(disable ? 'console.users.disabledOne' : 'console.users.enabledOne', { name: key.name })
        : t(disable ? 'console.users.disabledAll' : 'console.users.enabledAll', { n: f.n(r.api_keys.length) }),
    );
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
