import { useI18n } from '../i18n.js';
import type { ScreenProps } from './Console.js';

export function Operators(_props: ScreenProps) {
  const { t } = useI18n();
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.operators.title')}</h1>
      <p class="empty">{t('console.soon')}</p>
    </section>
  );
}
