import { useState } from 'preact/hooks';
import { ErrorBox, Field, Notice } from '../components/ui.js';
import { admin, seg, type Operator } from './api.js';
import type { ScreenProps } from './Console.js';
import { ActionForm, Confirm, DataTable, To, useFormat, useLoad, userHref } from './shared.js';

/** Operators: the recorded ones (by the command line, this console, the first user, a claim); add and remove. */
export function Operators(_props: ScreenProps) {
  const f = useFormat();
  const { t } = f;
  const { data, error, reload } = useLoad(() => admin<{ list: Operator[] }>('GET', '/operators'), []);
  const [user, setUser] = useState('');
  const [notice, setNotice] = useState('');
  const [removing, setRemoving] = useState<Operator | null>(null);
  const add = async () => {
    setNotice('');
    const id = user.trim();
    await admin('POST', '/operators', { user_id: id });
    setUser('');
    await reload();
    return t('console.operators.added', { user: id });
  };
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.operators.title')}</h1>
      <p class="hint">{t('console.operators.intro')}</p>
      <ActionForm id="operator-form" title={t('console.operators.addTitle')} submit={t('console.operators.add')} run={add}>
        <div class="row">
          <Field id="operator-user" label={t('console.operators.user')} hint={t('console.operators.userHint')}>
            <input id="operator-user" required maxLength={255} value={user} aria-describedby="operator-user-hint" onInput={(e) => setUser(e.currentTarget.value)} />
          </Field>
        </div>
      </ActionForm>
      {notice && <Notice kind="ok">{notice}</Notice>}
      <ErrorBox error={error} />
      {data && (
        <DataTable
          id="operators-table"
          caption={t('console.operators.count', { n: f.n(data.list.length) })}
          head={[t('console.operators.user'), t('console.operators.source'), t('console.operators.addedBy'), t('console.operators.addedAt'), t('keys.actions')]}
        >
          {data.list.map((o) => (
            <tr data-user-id={o.user_id}>
              <th scope="row" data-label={t('console.operators.user')}>
                <To href={userHref(o.user_id)}>{o.user_id}</To>
              </th>
              <td data-label={t('console.operators.source')}>{t(`console.operators.sources.${o.source}`)}</td>
              <td data-label={t('console.operators.addedBy')}>{o.added_by}</td>
              <td data-label={t('console.operators.addedAt')}>{f.when(o.created_at)}</td>
              <td class="actions" data-label={t('keys.actions')}>
                <button type="button" class="danger small" onClick={() => setRemoving(o)} aria-label={t('console.operators.removeNamed', { user: o.user_id })}>
                  {t('console.operators.remove')}
                </button>
              </td>
            </tr>
          ))}
        </DataTable>
      )}
      <Confirm
        open={removing !== null}
        id="operator-remove"
        title={removing ? t('console.operators.removeTitle', { user: removing.user_id }) : ''}
        text={t('console.operators.removeText')}
        yes={t('console.operators.remove')}
        danger
        onClose={() => setRemoving(null)}
        onYes={async () => {
          const id = removing!.user_id;
          await admin('DELETE', `/operators/${seg(id)}`);
          // the list first, then the sentence: what it says is what the list shows
          await reload();
          setNotice(t('console.operators.removed', { user: id }));
        }}
      />
    </section>
  );
}
