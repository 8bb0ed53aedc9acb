import { useEffect, useRef, useState } from 'preact/hooks';
import { portal, type Balance, type Me, type UsageQuery, type UsageReport, type UsageRow } from '../api.js';
import { formatNumber, useI18n, type Key } from '../i18n.js';
import { ErrorBox, Field } from '../components/ui.js';
import { BarChart } from '../components/BarChart.js';

/** a local day as a date input holds it (YYYY-MM-DD) */
export const day = (d: Date) => `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
export const daysAgo = (n: number) => day(new Date(Date.now() - n * 86_400_000));
/** the first second of a local day (or of the day after it) */
export const localSeconds = (date: string, endOfDay = false) => {
  const [y, m, d] = date.split('-').map(Number);
  return Math.floor(new Date(y, m - 1, d + (endOfDay ? 1 : 0)).getTime() / 1000);
};
/** the ledger's days are UTC days: one point for each UTC day a report's range touches */
export function utcDays(report: { start_time: number; end_time: number } | null): string[] {
  const days: string[] = [];
  if (report) for (let s = report.start_time - (report.start_time % 86_400); s < report.end_time; s += 86_400) days.push(new Date(s * 1000).toISOString().slice(0, 10));
  return days;
}

type Metric = 'cost' | 'requests' | 'tokens' | 'characters' | 'audio_seconds' | 'output_audio_seconds';
/** the charts, spend first; a chart whose figure is zero all through the range is left out */
const METRICS: Array<{ key: Metric; label: Key; digits: number }> = [
  { key: 'cost', label: 'usage.spend', digits: 4 },
  { key: 'requests', label: 'usage.requests', digits: 0 },
  { key: 'tokens', label: 'usage.tokens', digits: 0 },
  { key: 'characters', label: 'usage.characters', digits: 0 },
  { key: 'audio_seconds', label: 'usage.audioSeconds', digits: 1 },
  { key: 'output_audio_seconds', label: 'usage.outputAudioSeconds', digits: 1 },
];
/** the sums every usage row has (the portal's and the admin API's) */
type Counts = Pick<UsageRow, 'requests' | 'input_tokens' | 'output_tokens' | 'characters' | 'audio_seconds' | 'output_audio_seconds' | 'cost'>;
const value = (r: Counts, k: Metric) => (k === 'tokens' ? r.input_tokens + r.output_tokens : r[k]);
type Split = 'model' | 'key';

interface Group<R extends Counts = UsageRow> {
  id: string;
  label: string;
  rows: R[];
}
const sum = (rows: Counts[], k: Metric) => rows.reduce((a, r) => a + value(r, k), 0);

export function Usage({ me }: { me: Me | null }) {
  const { t, lang } = useI18n();
  const [from, setFrom] = useState(daysAgo(29));
  const [to, setTo] = useState(day(new Date()));
  const [org, setOrg] = useState('default');
  const [usage, setUsage] = useState<UsageReport | null>(null);
  const [split, setSplit] = useState<Split>('model');
  const [balance, setBalance] = useState<Balance | null>(null);
  const [error, setError] = useState<unknown>(null);

  // the answer to the latest request wins: one that comes back after a newer one was sent is dropped
  const latest = useRef(0);
  const load = async (f = from, tt = to) => {
    const mine = ++latest.current;
    setError(null);
    const params: UsageQuery = { start_time: localSeconds(f), end_time: localSeconds(tt, true), group_by: 'day,model,key' };
    if (org !== 'default') params.org_id = org;
    const q = new URLSearchParams(Object.entries(params).map(([k, v]) => [k, String(v)]));
    const o = org === 'default' ? '' : `org_id=${encodeURIComponent(org)}`;
    try {
      const [u, b] = await Promise.all([portal<UsageReport>('GET', `/query/usage?${q}`), portal<Balance>('GET', `/query/balance${o ? '?' + o : ''}`)]);
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
  const days = utcDays(usage);
  // the groups that have records in the range (a model or key without any is not shown)
  const groupsBy = (by: Split): Group[] => {
    const m = new Map<string, Group>();
    for (const r of usage?.list ?? []) {
      const id = (by === 'model' ? r.model : r.key_id) ?? '';
      let g = m.get(id);
      if (!g) {
        const label = by === 'model' ? id : `${r.key_name ?? id}${r.key_deleted ? ` (${t('usage.deleted')})` : ''}`;
        m.set(id, (g = { id, label, rows: [] }));
      }
      g.rows.push(r);
    }
    return [...m.values()].sort((a, b) => a.label.localeCompare(b.label));
  };
  const models = groupsBy('model');
  const keys = groupsBy('key');
  const groups = split === 'model' ? models : keys;
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
            <span class="label">{t('usage.outputAudioSeconds')}</span>
            <span class="value">{n(usage.total.output_audio_seconds, 1)}</span>
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
          <fieldset class="split">
            <legend>{t('usage.splitBy')}</legend>
            {(['model', 'key'] as const).map((b) => (
              <label>
                <input type="radio" name="usage-split" value={b} checked={split === b} onChange={() => setSplit(b)} />
                {t(b === 'model' ? 'usage.byModelShort' : 'usage.byKeyShort')}
              </label>
            ))}
          </fieldset>
          <div class="charts">
            {METRICS.map((m) => {
              // only the series with something to show in this chart, and only charts with something in them
              const series = groups
                .filter((g) => sum(g.rows, m.key) > 0)
                .map((g) => ({ label: g.label, values: days.map((d) => g.rows.filter((r) => r.date === d).reduce((a, r) => a + value(r, m.key), 0)) }));
              if (series.length === 0) return null;
              return <BarChart id={`chart-${m.key}`} title={t(m.label)} days={days} series={series} format={(x) => n(x, m.digits)} whole={m.digits === 0} />;
            })}
          </div>
          <UsageTable id="usage-by-model" caption={t('usage.byModel')} head={t('play.model')} groups={models} n={n} />
          <UsageTable id="usage-by-key" caption={t('usage.byKey')} head={t('keys.key')} groups={keys} n={n} />
        </>
      )}
    </section>
  );
}

/** One row per group (a model, a key; in the console a user, an organization...), with the range's totals. */
export function UsageTable({ id, caption, head, groups, n }: { id: string; caption: string; head: string; groups: Array<Group<Counts>>; n: (x: number, d?: number) => string }) {
  const { t } = useI18n();
  return (
    <div class="table-wrap">
      <table id={id}>
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">{head}</th>
            <th scope="col">{t('usage.requests')}</th>
            <th scope="col">{t('usage.tokens')}</th>
            <th scope="col">{t('usage.characters')}</th>
            <th scope="col">{t('usage.audioSeconds')}</th>
            <th scope="col">{t('usage.outputAudioSeconds')}</th>
            <th scope="col">{t('usage.cost')}</th>
          </tr>
        </thead>
        <tbody>
          {groups.map((g) => (
            <tr>
              <th scope="row">{g.label}</th>
              <td data-label={t('usage.requests')}>{n(sum(g.rows, 'requests'))}</td>
              <td data-label={t('usage.tokens')}>{n(sum(g.rows, 'tokens'))}</td>
              <td data-label={t('usage.characters')}>{n(sum(g.rows, 'characters'))}</td>
              <td data-label={t('usage.audioSeconds')}>{n(sum(g.rows, 'audio_seconds'), 1)}</td>
              <td data-label={t('usage.outputAudioSeconds')}>{n(sum(g.rows, 'output_audio_seconds'), 1)}</td>
              <td data-label={t('usage.cost')}>{n(sum(g.rows, 'cost'), 4)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
