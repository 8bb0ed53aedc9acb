import { useI18n } from '../i18n.js';
import type { ScreenProps } from './Console.js';

/** A placeholder: the Health screen comes with branch p25-console2. */
export function Health(_props: ScreenProps) {
  const { t } = useI18n();
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.health.title')}</h1>
      <p class="empty">{t('console.soon')}</p>
    </section>
  );
}
