import { useEffect, useRef, useState } from 'preact/hooks';
import { portal, type Balance, type Me } from '../api.js';
import { formatNumber, useI18n, type Key } from '../i18n.js';
import { ErrorBox, Field } from '../components/ui.js';
import type { Series } from '../chart.js';

interface UsageRow {
  /** UTC day, YYYY-MM-DD */
  date?: string;
  model?: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  characters: number;
  audio_seconds: number;
  cost: number;
}
interface UsageResult {
  start_time: number;
  end_time: number;
  list: UsageRow[];
  total: Omit<UsageRow, 'date' | 'model'>;
}

const day = (d: Date) => `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
const daysAgo = (n: number) => day(new Date(Date.now() - n * 86_400_000));
const localSeconds = (date: string, endOfDay = false) => {
  const [y, m, d] = date.split('-').map(Number);
  return Math.floor(new Date(y, m - 1, d + (endOfDay ? 1 : 0)).getTime() / 1000);
};

const METRICS: Array<{ key: 'requests' | 'tokens' | 'characters' | 'audio_seconds'; label: Key }> = [
  { key: 'requests', label: 'usage.requests' },
  { key: 'tokens', label: 'usage.tokens' },
  { key: 'characters', label: 'usage.characters' },
  { key: 'audio_seconds', label: 'usage.audioSeconds' },
];
const value = (r: UsageRow, k: (typeof METRICS)[number]['key']) => (k === 'tokens' ? r.input_tokens + r.output_tokens : r[k]);

export function Usage({ me }: { me: Me | null }) {
  const { t, lang } = useI18n();
  const [from, setFrom] = useState(daysAgo(29));
  const [to, setTo] = useState(day(new Date()));
  const [org, setOrg] = useState('default');
  const [usage, setUsage] = useState<UsageResult | null>(null);
  const [balance, setBalance] = useState<Balance | null>(null);
  const [error, setError] = useState<unknown>(null);

  // the answer to the latest request wins: one that comes back after a newer one was sent is dropped
  const latest = useRef(0);
  const load = async (f = from, tt = to) => {
    const mine = ++latest.current;
    setError(null);
    const q = new URLSearchParams({ start_time: String(localSeconds(f)), end_time: String(localSeconds(tt, true)), group_by: 'day,model' });
    const o = org === 'default' ? '' : `org_id=${encodeURIComponent(org)}`;
    if (o) q.set('org_id', org);
    try {
      const [u, b] = await Promise.all([portal<UsageResult>('GET', `/query/usage?${q}`), portal<Balance>('GET', `/query/balance${o ? '?' + o : ''}`)]);
      if (mine !== latest.current) return;
      setUsage(u);
      setBalance(b);
    } catch (e) {
      if (mine === latest.current) setError(e);
    }
  };
  useEffect(() => {
    void load();
  }, [org]);

  const preset = (n: number) => {
    const f = daysAgo(n - 1);
    const tt = day(new Date());
    setFrom(f);
    setTo(tt);
    void load(f, tt);
  };
  // the ledger's days are UTC days: one point for each UTC day the range touches
  const days: string[] = [];
  if (usage) for (let s = usage.start_time - (usage.start_time % 86_400); s < usage.end_time; s += 86_400) days.push(new Date(s * 1000).toISOString().slice(0, 10));
  const models = usage ? [...new Set(usage.list.map((r) => r.model ?? ''))].sort() : [];
  const byModel = models.map((m) => {
    const rows = usage!.list.filter((r) => r.model === m);
    const sum = (f: (r: UsageRow) => number) => rows.reduce((a, r) => a + f(r), 0);
    return {
      model: m,
      requests: sum((r) => r.requests),
      tokens: sum((r) => r.input_tokens + r.output_tokens),
      characters: sum((r) => r.characters),
      audio: sum((r) => r.audio_seconds),
      cost: sum((r) => r.cost),
    };
  });
  const n = (x: number, d = 0) => formatNumber(lang, x, d);

  return (
    <section>
      <h1 tabIndex={-1}>{t('usage.title')}</h1>
      <form
        class="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          void load();
        }}
      >
        <Field id="usage-from" label={t('usage.from')}>
          <input id="usage-from" type="date" required value={from} max={to} onInput={(e) => setFrom(e.currentTarget.value)} />
        </Field>
        <Field id="usage-to" label={t('usage.to')}>
          <input id="usage-to" type="date" required value={to} min={from} onInput={(e) => setTo(e.currentTarget.value)} />
        </Field>
        {me && me.admin_orgs.length > 0 && (
          <Field id="usage-org" label={t('usage.scope')}>
            <select id="usage-org" value={org} onChange={(e) => setOrg(e.currentTarget.value)}>
              <option value="default">{t('keys.personal')}</option>
              {me.admin_orgs.map((o) => (
                <option value={o}>{o}</option>
              ))}
            </select>
          </Field>
        )}
        <div class="buttons">
          <button type="submit">{t('usage.show')}</button>
          {[7, 30, 90].map((d) => (
            <button type="button" class="secondary small" onClick={() => preset(d)}>
              {t('usage.lastDays', { n: d })}
            </button>
          ))}
        </div>
      </form>
      <ErrorBox error={error} />
      {balance && usage && (
        <div class="cards" id="usage-totals">
          {balance.billing_enabled ? (
            <div class="stat">
              <span class="label">{t('usage.balance')}</span>
              <span class="value" id="balance-value">
                {n(balance.balance, 4)}
              </span>
              <span class="muted">{t('usage.granted', { granted: n(balance.granted, 4), used: n(balance.used, 4) })}</span>
            </div>
          ) : (
            // billing off: nothing is refused for the balance, so a balance below zero would only alarm; the cost is shown
            <div class="stat">
              <span class="label">{t('usage.used')}</span>
              <span class="value" id="balance-value">
                {n(balance.used, 4)}
              </span>
              <span class="muted">{t('usage.billing_off')}</span>
            </div>
          )}
          <div class="stat">
            <span class="label">{t('usage.requests')}</span>
            <span class="value">{n(usage.total.requests)}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.tokens')}</span>
            <span class="value">{n(usage.total.input_tokens + usage.total.output_tokens)}</span>
            <span class="muted">{t('usage.inOut', { input: n(usage.total.input_tokens), output: n(usage.total.output_tokens) })}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.characters')}</span>
            <span class="value">{n(usage.total.characters)}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.audioSeconds')}</span>
            <span class="value">{n(usage.total.audio_seconds, 1)}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.cost')}</span>
            <span class="value">{n(usage.total.cost, 4)}</span>
          </div>
        </div>
      )}
      {usage && usage.list.length === 0 && <p class="empty">{t('usage.none')}</p>}
      {usage && usage.list.length > 0 && (
        <>
          <div class="charts">
            {METRICS.map((m) => (
              <Chart
                title={t(m.label)}
                days={days}
                series={models.map((model) => ({
                  label: model,
                  values: days.map((d) => usage.list.filter((r) => r.model === model && r.date === d).reduce((a, r) => a + value(r, m.key), 0)),
                }))}
              />
            ))}
          </div>
          <div class="table-wrap">
            <table>
              <caption>{t('usage.byModel')}</caption>
              <thead>
                <tr>
                  <th scope="col">{t('play.model')}</th>
                  <th scope="col">{t('usage.requests')}</th>
                  <th scope="col">{t('usage.tokens')}</th>
                  <th scope="col">{t('usage.characters')}</th>
                  <th scope="col">{t('usage.audioSeconds')}</th>
                  <th scope="col">{t('usage.cost')}</th>
                </tr>
              </thead>
              <tbody>
                {byModel.map((r) => (
                  <tr>
                    <th scope="row">{r.model}</th>
                    <td data-label={t('usage.requests')}>{n(r.requests)}</td>
                    <td data-label={t('usage.tokens')}>{n(r.tokens)}</td>
                    <td data-label={t('usage.characters')}>{n(r.characters)}</td>
                    <td data-label={t('usage.audioSeconds')}>{n(r.audio, 1)}</td>
                    <td data-label={t('usage.cost')}>{n(r.cost, 4)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

/** One chart; the charting library is loaded the first time a chart is shown (not with the first page). */
function Chart({ title, days, series }: { title: string; days: string[]; series: Series[] }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let dispose: (() => void) | undefined;
    let gone = false;
    void import('../chart.js').then(({ drawChart }) => {
      if (!gone && box.current) dispose = drawChart(box.current, days, series);
    });
    return () => {
      gone = true;
      dispose?.();
    };
  }, [JSON.stringify([days, series])]);
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} class="plot" role="img" aria-label={`${title}: ${series.map((s) => `${s.label} ${s.values.reduce((a, b) => a + b, 0)}`).join(', ')}`} />
    </figure>
  );
}
