import { useState } from 'preact/hooks';
import { ErrorBox, Notice } from '../components/ui.js';
import { admin, seg, type AdminOrg, type AdminOrgDetail, type BudgetWithSpend, type OrgMember } from './api.js';
import type { ScreenProps } from './Console.js';
import { BudgetForm, BudgetTable, CreditsForm, DataTable, Figures, KeyTable, SearchList, To, orgHref, useFormat, useLoad, useSummaryColumns, userHref } from './shared.js';

/** Organizations: search and list (/console/orgs), or one (/console/orgs/<id>). */
export function Orgs({ sub }: ScreenProps) {
  return sub ? <Org id={sub} /> : <OrgList />;
}

function OrgList() {
  const f = useFormat();
  const { t } = f;
  const summary = useSummaryColumns();
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.orgs.title')}</h1>
      <SearchList<AdminOrg> path="/orgs" id="orgs" label={t('console.orgs.search')}>
        {(data, search) =>
          data.list.length === 0 ? (
            <p class="empty">{search ? t('console.orgs.noMatch', { search }) : t('console.orgs.none')}</p>
          ) : (
            <DataTable id="orgs-table" caption={t('console.orgs.count', { total: f.n(data.total) })} head={[t('console.orgs.org'), t('console.orgs.members'), ...summary.head]}>
              {data.list.map((o) => (
                <tr data-org-id={o.org_id}>
                  <th scope="row" data-label={t('console.orgs.org')}>
                    <To href={orgHref(o.org_id)}>{o.org_id}</To>
                  </th>
                  <td data-label={t('console.orgs.members')}>{t('console.orgs.memberCounts', { members: f.n(o.members), admins: f.n(o.admins) })}</td>
                  {summary.cells(o)}
                </tr>
              ))}
            </DataTable>
          )
        }
      </SearchList>
    </section>
  );
}

function Org({ id }: { id: string }) {
  const f = useFormat();
  const { t } = f;
  const org = useLoad(() => admin<AdminOrgDetail>('GET', `/orgs/${seg(id)}`), [id]);
  const budgets = useLoad(() => admin<{ list: BudgetWithSpend[] }>('GET', '/budgets'), [id]);
  const [roleError, setRoleError] = useState<unknown>(null);
  const [notice, setNotice] = useState('');
  const o = org.data;
  const keyIds = new Set(o?.api_keys.map((k) => k.id));
  const mine = (budgets.data?.list ?? []).filter((b) => (b.scope === 'org' && b.target === id) || (b.scope === 'key' && keyIds.has(b.target)));

  const setRole = async (m: OrgMember) => {
    const role = m.role === 'admin' ? 'member' : 'admin';
    setRoleError(null);
    setNotice('');
    try {
      await admin('PUT', `/orgs/${seg(id)}/members/${seg(m.user_id)}`, { role });
      // the list first, then the sentence: what it says is what the list shows
      await org.reload();
      setNotice(t('console.orgs.roleChanged', { user: m.user_id, role: t(`console.orgs.role.${role}`) }));
    } catch (e) {
      setRoleError(e);
    }
  };

  return (
    <section>
      <p class="crumb">
        <To href="/console/orgs">{t('console.orgs.back')}</To>
      </p>
      <h1 tabIndex={-1}>{t('console.orgs.one', { org: id })}</h1>
      <ErrorBox error={org.error} />
      {o && (
        <>
          <Figures balance={o.balance} period={o.period}>
            <div class="stat">
              <span class="label">{t('console.common.lastActivity')}</span>
              <span class="value small-value">{f.when(o.last_activity)}</span>
              <span class="muted">{t('console.orgs.memberCounts', { members: f.n(o.members), admins: f.n(o.admins) })}</span>
            </div>
          </Figures>
          <section class="card" aria-labelledby="org-members-title">
            <h2 id="org-members-title">{t('console.orgs.membersTitle', { n: f.n(o.member_list.length) })}</h2>
            <p class="hint">{t('console.orgs.roleHint')}</p>
            <ErrorBox error={roleError} />
            {notice && <Notice kind="ok">{notice}</Notice>}
            {o.member_list.length === 0 ? (
              <p class="empty">{t('console.orgs.noMembers')}</p>
            ) : (
              <DataTable
                id="org-members"
                caption={t('console.orgs.membersTitle', { n: f.n(o.member_list.length) })}
                hideCaption
                head={[t('console.users.user'), t('console.orgs.roleLabel'), t('console.common.keys'), t('keys.actions')]}
              >
                {o.member_list.map((m) => (
                  <tr data-user-id={m.user_id}>
                    <th scope="row" data-label={t('console.users.user')}>
                      <To href={userHref(m.user_id)}>{m.user_id}</To>
                    </th>
                    <td data-label={t('console.orgs.roleLabel')}>
                      <span class={`badge role-${m.role}`}>{t(`console.orgs.role.${m.role}`)}</span>
                    </td>
                    <td data-label={t('console.common.keys')}>{f.n(o.api_keys.filter((k) => k.user_id === m.user_id).length)}</td>
                    <td class="actions" data-label={t('keys.actions')}>
                      <button
                        type="button"
                        class="secondary small"
                        onClick={() => void setRole(m)}
                        aria-label={t(m.role === 'admin' ? 'console.orgs.makeMemberNamed' : 'console.orgs.makeAdminNamed', { user: m.user_id })}
                      >
                        {t(m.role === 'admin' ? 'console.orgs.makeMember' : 'console.orgs.makeAdmin')}
                      </button>
                    </td>
                  </tr>
                ))}
              </DataTable>
            )}
          </section>
          <section class="card" aria-labelledby="org-keys-title">
            <h2 id="org-keys-title">{t('console.orgs.keysTitle', { n: f.n(o.api_keys.length) })}</h2>
            <KeyTable id="org-keys" keys={o.api_keys} showOwner />
          </section>
          <CreditsForm who={{ org_id: id }} onDone={() => void org.reload()} />
          <section class="card" aria-labelledby="org-budgets-title">
            <h2 id="org-budgets-title">{t('console.orgs.budgetsTitle')}</h2>
            <ErrorBox error={budgets.error} />
            <BudgetTable id="org-budgets" budgets={mine} showTarget onRemoved={() => void budgets.reload()} />
          </section>
          <BudgetForm scope="org" target={id} fixed onDone={() => void budgets.reload()} />
        </>
      )}
    </section>
  );
}
