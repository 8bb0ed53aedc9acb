import { useI18n } from '../i18n.js';
import type { ScreenProps } from './Console.js';

/** A placeholder: the Models screen comes with branch p25-console2. */
export function Models(_props: ScreenProps) {
  const { t } = useI18n();
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.models.title')}</h1>
      <p class="empty">{t('console.soon')}</p>
    </section>
  );
}
