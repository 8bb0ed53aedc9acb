import { ErrorBox } from '../components/ui.js';
import { useI18n } from '../i18n.js';
import { admin, type BudgetWithSpend } from './api.js';
import type { ScreenProps } from './Console.js';
import { BudgetForm, BudgetTable, useLoad } from './shared.js';

/** Budgets: every budget with what is spent in its period; set one per key, user or organization; remove. */
export function Budgets(_props: ScreenProps) {
  const { t } = useI18n();
  const { data, error, reload } = useLoad(() => admin<{ list: BudgetWithSpend[] }>('GET', '/budgets'), []);
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.budgets.title')}</h1>
      <p class="hint">{t('console.budgets.intro')}</p>
      <BudgetForm onDone={() => void reload()} />
      <ErrorBox error={error} />
      {data && (
        <section class="card" aria-labelledby="budgets-list-title">
          <h2 id="budgets-list-title">{t('console.budgets.listTitle', { n: data.list.length })}</h2>
          <BudgetTable id="budgets-table" budgets={data.list} showTarget onRemoved={() => void reload()} />
        </section>
      )}
    </section>
  );
}
