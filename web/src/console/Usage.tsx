import { useState } from 'preact/hooks';
import { ErrorBox, Field } from '../components/ui.js';
import { BarChart, COLORS } from '../components/BarChart.js';
import { formatDay, type Key } from '../i18n.js';
import { UsageTable, day, daysAgo, localSeconds, utcDays } from '../pages/Usage.js';
import { admin, query, type AdminUsage, type AdminUsageRow } from './api.js';
import type { ScreenProps } from './Console.js';
import { useFormat, useLoad } from './shared.js';

type Group = 'day' | 'model' | 'user' | 'org' | 'key';
const GROUPS: Group[] = ['day', 'model', 'user', 'org', 'key'];
type Metric = 'cost' | 'requests' | 'tokens';
const METRICS: Array<{ key: Metric; label: Key; digits: number }> = [
  { key: 'cost', label: 'usage.spend', digits: 4 },
  { key: 'requests', label: 'usage.requests', digits: 0 },
  { key: 'tokens', label: 'usage.tokens', digits: 0 },
];
const value = (r: AdminUsageRow, m: Metric) => (m === 'tokens' ? r.input_tokens + r.output_tokens : r[m]);
/** the chart shows this many groups and puts the rest together */
const SHOWN = COLORS.length - 1;

/** Usage of everyone: grouped by day, model, user, organization or key, as a chart of daily totals and a table. */
export function Usage(_props: ScreenProps) {
  const f = useFormat();
  const { t, lang } = f;
  const [from, setFrom] = useState(daysAgo(29));
  const [to, setTo] = useState(day(new Date()));
  const [group, setGroup] = useState<Group>('model');
  const [metric, setMetric] = useState<Metric>('cost');
  const [asked, setAsked] = useState({ from, to, group });
  const { data, error } = useLoad(
    () =>
      admin<AdminUsage>(
        'GET',
        `/usage${query({ start_time: localSeconds(asked.from), end_time: localSeconds(asked.to, true), group_by: asked.group === 'day' ? 'day' : `day,${asked.group}` })}`,
      ),
    [asked],
  );
  const g = asked.group;
  const idOf = (r: AdminUsageRow) =>
    g === 'day' ? (r.date ?? '') : g === 'model' ? (r.model ?? '') : g === 'user' ? (r.user_id ?? '') : g === 'org' ? (r.org_id ?? '') : (r.key_id ?? '');
  const labelOf = (r: AdminUsageRow) => {
    if (g === 'day') return formatDay(lang, r.date ?? '');
    if (g === 'org') return r.org_id === 'default' ? t('console.usage.personal') : (r.org_id ?? '');
    if (g === 'key') return r.key ? `${r.key.name} (${r.key.user_id})${r.key.status === 'deleted' ? ` · ${t('usage.deleted')}` : ''}` : (r.key_id ?? '');
    return idOf(r);
  };
  const days = utcDays(data);
  // the groups with their rows, largest first by the chosen figure
  const groups = new Map<string, { id: string; label: string; rows: AdminUsageRow[] }>();
  for (const r of data?.list ?? []) {
    const id = idOf(r);
    let e = groups.get(id);
    if (!e) groups.set(id, (e = { id, label: labelOf(r), rows: [] }));
    e.rows.push(r);
  }
  const total = (rows: AdminUsageRow[], m: Metric) => rows.reduce((a, r) => a + value(r, m), 0);
  const ordered = [...groups.values()].sort((a, b) => (g === 'day' ? 0 : total(b.rows, metric) - total(a.rows, metric)));
  const m = METRICS.find((x) => x.key === metric)!;
  const perDay = (rows: AdminUsageRow[]) => days.map((d) => rows.filter((r) => r.date === d).reduce((a, r) => a + value(r, metric), 0));
  const series =
    g === 'day'
      ? [{ label: t(m.label), values: perDay(data?.list ?? []) }]
      : [
          ...ordered.slice(0, SHOWN).map((x) => ({ label: x.label, values: perDay(x.rows) })),
          ...(ordered.length > SHOWN ? [{ label: t('console.usage.others', { n: ordered.length - SHOWN }), values: perDay(ordered.slice(SHOWN).flatMap((x) => x.rows)) }] : []),
        ];
  const groupLabel = (x: Group) => t(`console.usage.by.${x}`);
  // in a sentence ("Spend by user"); Chinese has no case
  const groupWord = (x: Group) => groupLabel(x).toLocaleLowerCase(lang === 'zh' ? 'zh-CN' : 'en');
  return (
    <section>
      <h1 tabIndex={-1}>{t('console.usage.title')}</h1>
      <form
        class="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          setAsked({ from, to, group });
        }}
      >
        <Field id="cu-from" label={t('usage.from')}>
          <input id="cu-from" type="date" required value={from} max={to} onInput={(e) => setFrom(e.currentTarget.value)} />
        </Field>
        <Field id="cu-to" label={t('usage.to')}>
          <input id="cu-to" type="date" required value={to} min={from} onInput={(e) => setTo(e.currentTarget.value)} />
        </Field>
        <Field id="cu-group" label={t('console.usage.groupBy')}>
          <select id="cu-group" value={group} onChange={(e) => setGroup(e.currentTarget.value as Group)}>
            {GROUPS.map((x) => (
              <option value={x}>{groupLabel(x)}</option>
            ))}
          </select>
        </Field>
        <div class="buttons">
          <button type="submit" id="cu-show">
            {t('usage.show')}
          </button>
        </div>
      </form>
      <ErrorBox error={error} />
      {data && (
        <div class="cards" id="cu-totals">
          <div class="stat">
            <span class="label">{t('usage.cost')}</span>
            <span class="value">{f.credits(data.total.cost)}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.requests')}</span>
            <span class="value">{f.n(data.total.requests)}</span>
          </div>
          <div class="stat">
            <span class="label">{t('usage.tokens')}</span>
            <span class="value">{f.n(data.total.input_tokens + data.total.output_tokens)}</span>
            <span class="muted">{t('usage.inOut', { input: f.n(data.total.input_tokens), output: f.n(data.total.output_tokens) })}</span>
          </div>
        </div>
      )}
      {data && data.list.length === 0 && <p class="empty">{t('usage.none')}</p>}
      {data && data.list.length > 0 && (
        <>
          <fieldset class="split">
            <legend>{t('console.usage.chartOf')}</legend>
            {METRICS.map((x) => (
              <label>
                <input type="radio" name="cu-metric" value={x.key} checked={metric === x.key} onChange={() => setMetric(x.key)} />
                {t(x.label)}
              </label>
            ))}
          </fieldset>
          <div class="charts">
            <BarChart
              id="cu-chart"
              title={t('console.usage.chartTitle', { what: t(m.label), by: groupWord(g) })}
              days={days}
              series={series}
              format={(x) => f.n(x, m.digits)}
              whole={m.digits === 0}
            />
          </div>
          <UsageTable id="cu-table" caption={t('console.usage.tableTitle', { by: groupWord(g) })} head={groupLabel(g)} groups={ordered} n={f.n} />
        </>
      )}
    </section>
  );
}
