import { useEffect, useState } from 'preact/hooks';
import { admin, type AdminHealth as HealthData, type BreakerState, type HealthDeployment } from './api.js';
import type { ScreenProps } from './Console.js';
import { describeError, formatNumber, useI18n, type Lang, type T } from '../i18n.js';

/** how often the screen asks again while it is shown */
export const HEALTH_REFRESH_MS = 3000;

const STATE_MARK: Record<BreakerState, string> = { closed: '●', 'half-open': '◐', open: '○' };

const clock = (lang: Lang, ms: number) => new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', { timeStyle: 'medium' }).format(new Date(ms));

/**
 * Every deployment's health: its breaker, error rate, latencies, load against its limits, and per instance on demand.
 * Asked again every 3 s while the screen is shown and the tab visible (a hidden tab or another screen asks nothing);
 * the table keeps its rows and sizes between answers, so nothing moves under the reader's eyes.
 */
export function Health(_props: ScreenProps) {
  const { t, lang } = useI18n();
  const [data, setData] = useState<HealthData | null>(null);
  const [updated, setUpdated] = useState<number | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [paused, setPaused] = useState(false);
  const [open, setOpen] = useState<Set<string>>(() => new Set());

  useEffect(() => {
    let stopped = false;
    let busy = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const visible = () => document.visibilityState === 'visible';
    const tick = async () => {
      timer = undefined;
      if (stopped || busy || !visible()) return;
      busy = true;
      try {
        const h = await admin<HealthData>('GET', '/health');
        if (stopped) return;
        setData(h);
        setUpdated(Date.now());
        setError(null);
      } catch (e) {
        if (!stopped) setError(e);
      } finally {
        busy = false;
      }
      if (!stopped && visible()) timer = setTimeout(tick, HEALTH_REFRESH_MS);
    };
    const onVisibility = () => {
      clearTimeout(timer);
      timer = undefined;
      setPaused(!visible());
      // back in view: the numbers are old, ask at once (unless an answer is on its way: it schedules the next)
      if (visible()) void tick();
    };
    document.addEventListener('visibilitychange', onVisibility);
    void tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
    };
  }, []);

  const toggle = (k: string) =>
    setOpen((s) => {
      const n = new Set(s);
      if (n.has(k)) n.delete(k);
      else n.add(k);
      return n;
    });

  const hosts = new Map((data?.instances ?? []).map((i) => [i.id, i]));
  const failed = error ? describeError(error, lang, t).message : '';
  return (
    <section class="console-health">
      <h1 tabIndex={-1}>{t('console.health.title')}</h1>
      <p class="hint">{data ? t('console.health.intro', { s: formatNumber(lang, data.window_seconds), every: HEALTH_REFRESH_MS / 1000 }) : t('common.loading')}</p>
      <div class="refresh-line" id="health-updated">
        <span role="status">{updated !== null && t('console.health.updated', { time: clock(lang, updated) })}</span>
        {paused && <span class="muted"> · {t('console.health.paused')}</span>}
        {failed && (
          <span class="refresh-error" role="alert">
            {' '}
            · {t('console.health.refreshFailed', { message: failed })}
          </span>
        )}
      </div>
      {data && data.instances.length > 0 && (
        <p class="muted instances-line">
          {t('console.health.instances', { n: data.instances.length })}{' '}
          {data.instances.map((i) => (
            <span class="tag">
              {i.host}:{i.pid}
              {i.self ? ` (${t('console.health.thisInstance')})` : ''}
            </span>
          ))}
        </p>
      )}
      {data && data.deployments.length === 0 && <p class="empty">{t('console.health.none')}</p>}
      {data && data.deployments.length > 0 && (
        <div class="table-wrap">
          <table id="health-table" class="health">
            <caption class="visually-hidden">{t('console.health.title')}</caption>
            <colgroup>
              <col class="c-deployment" />
              <col class="c-state" />
              <col class="c-num" />
              <col class="c-num" />
              <col class="c-ms" />
              <col class="c-ms" />
              <col class="c-num" />
              <col class="c-load" />
              <col class="c-load" />
            </colgroup>
            <thead>
              <tr>
                <th scope="col">{t('console.health.deployment')}</th>
                <th scope="col">{t('console.health.state')}</th>
                <th scope="col">{t('console.health.requests')}</th>
                <th scope="col">{t('console.health.errorRate')}</th>
                <th scope="col">{t('console.health.latency')}</th>
                <th scope="col">{t('console.health.ttft')}</th>
                <th scope="col">{t('console.health.inFlight')}</th>
                <th scope="col">{t('console.health.rpm')}</th>
                <th scope="col">{t('console.health.tpm')}</th>
              </tr>
            </thead>
            {data.deployments.map((d) => {
              const k = `${d.model}\n${d.deployment}`;
              const expanded = open.has(k);
              const rowsId = `inst-${encodeURIComponent(d.deployment).replace(/%/g, '_')}`;
              return (
                <tbody key={k} data-deployment={d.deployment}>
                  <tr class="deployment-row">
                    <th scope="row">
                      <button
                        type="button"
                        class="expander"
                        aria-expanded={expanded}
                        aria-controls={d.instances.length ? d.instances.map((_, j) => `${rowsId}-${j}`).join(' ') : `${rowsId}-none`}
                        aria-label={t(expanded ? 'console.health.hideInstances' : 'console.health.showInstances', { deployment: d.deployment })}
                        onClick={() => toggle(k)}
                      >
                        <span aria-hidden="true">{expanded ? '▾' : '▸'}</span>
                      </button>
                      <code class="deployment-id">{d.deployment}</code>
                      <div class="muted">
                        {d.model} · {d.provider}
                      </div>
                    </th>
                    <td data-label={t('console.health.state')}>
                      <StateBadge state={d.state} />
                      {d.reason && <div class="muted reason">{d.reason}</div>}
                    </td>
                    <Numbers n={d} />
                    <td data-label={t('console.health.rpm')}>
                      <Load used={d.rpm.used} limit={d.rpm.limit} label={t('console.health.rpm')} />
                    </td>
                    <td data-label={t('console.health.tpm')}>
                      <Load used={d.tpm.used} limit={d.tpm.limit} label={t('console.health.tpm')} />
                    </td>
                  </tr>
                  {d.instances.map((i, j) => {
                    const host = hosts.get(i.instance);
                    return (
                      <tr class="instance-row" id={`${rowsId}-${j}`} hidden={!expanded}>
                        <th scope="row" class="instance-name">
                          <span class="muted">{t('console.health.instance')}</span> {host ? `${host.host}:${host.pid}` : i.instance}
                          {host?.self && <span class="muted"> ({t('console.health.thisInstance')})</span>}
                        </th>
                        <td data-label={t('console.health.state')}>
                          <StateBadge state={i.state} />
                        </td>
                        <Numbers n={i} />
                        <td data-label={t('console.health.rpm')} class="num">
                          {formatNumber(lang, i.rpm_used)}
                        </td>
                        <td data-label={t('console.health.tpm')} class="num">
                          {formatNumber(lang, i.tpm_used)}
                        </td>
                      </tr>
                    );
                  })}
                  {d.instances.length === 0 && (
                    <tr class="instance-row" id={`${rowsId}-none`} hidden={!expanded}>
                      <td colSpan={9} class="muted">
                        {t('console.health.noInstances')}
                      </td>
                    </tr>
                  )}
                </tbody>
              );
            })}
          </table>
        </div>
      )}
    </section>
  );
}

function StateBadge({ state }: { state: BreakerState }) {
  const { t } = useI18n();
  return (
    <span class={`badge breaker-${state}`}>
      <span aria-hidden="true">{STATE_MARK[state]} </span>
      {t(`console.health.state.${state}`)}
    </span>
  );
}

/** two durations as "p50 / p95 ms" (a missing one: —; neither: —) */
const pair = (lang: Lang, t: T, a: number | null, b: number | null) =>
  a === null && b === null ? '—' : t('console.health.msPair', { a: a === null ? '—' : formatNumber(lang, a), b: b === null ? '—' : formatNumber(lang, b) });

function Numbers({ n }: { n: Pick<HealthDeployment, 'requests' | 'failures' | 'error_rate' | 'p50_ms' | 'p95_ms' | 'ttft_p50_ms' | 'ttft_p95_ms' | 'in_flight'> }) {
  const { t, lang } = useI18n();
  return (
    <>
      <td data-label={t('console.health.requests')} class="num">
        {formatNumber(lang, n.requests)}
        {n.failures > 0 && <div class="muted">{t('console.health.failures', { n: formatNumber(lang, n.failures) })}</div>}
      </td>
      <td data-label={t('console.health.errorRate')} class={`num${n.error_rate >= 0.1 ? ' bad' : ''}`}>
        {n.requests === 0 ? '—' : `${formatNumber(lang, n.error_rate * 100, 1)} %`}
      </td>
      <td data-label={t('console.health.latency')} class="num">
        {pair(lang, t, n.p50_ms, n.p95_ms)}
      </td>
      <td data-label={t('console.health.ttft')} class="num">
        {pair(lang, t, n.ttft_p50_ms, n.ttft_p95_ms)}
      </td>
      <td data-label={t('console.health.inFlight')} class="num">
        {formatNumber(lang, n.in_flight)}
      </td>
    </>
  );
}

/** used against a limit: the figures, and a bar (a picture of the figures, so hidden from screen readers) */
function Load({ used, limit, label }: { used: number; limit: number | null; label: string }) {
  const { t, lang } = useI18n();
  const share = limit ? Math.min(1, used / limit) : 0;
  const level = share >= 0.9 ? 'high' : share >= 0.7 ? 'mid' : 'low';
  return (
    <div class="load" title={label}>
      <span class="num">{limit === null ? t('console.health.noLimit', { used: formatNumber(lang, used) }) : `${formatNumber(lang, used)} / ${formatNumber(lang, limit)}`}</span>
      {limit !== null && (
        <svg class={`load-bar ${level}`} width="100%" height="8" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true" focusable="false">
          <rect class="track" x="0" y="0" width="100" height="8" rx="2" />
          <rect class="fill" x="0" y="0" width={Math.max(used > 0 ? 1 : 0, share * 100)} height="8" rx="2" />
        </svg>
      )}
    </div>
  );
}
