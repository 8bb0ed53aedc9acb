import { useLayoutEffect, useRef, useState } from 'preact/hooks';
import { formatDay, useI18n } from '../i18n.js';

export interface Series {
  label: string;
  /** one value per day */
  values: number[];
}

/** Colours told apart by people with the common colour-vision deficiencies (Okabe-Ito, darkened for contrast). */
export const COLORS = ['#0072b2', '#d55e00', '#009e73', '#cc79a7', '#8a6d00', '#56b4e9', '#6b4c9a', '#4b5563'];

const HEIGHT = 200;
const PAD = { left: 52, right: 8, top: 10, bottom: 26 };

/** The axis' steps: a round step (1, 2, 2.5 or 5 times a power of ten; whole for counts) and about four of them. */
function axis(max: number, whole: boolean): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / 4;
  const p = 10 ** Math.floor(Math.log10(raw));
  let step = 10 * p;
  for (const m of [1, 2, 2.5, 5]) {
    if (m * p >= raw * (1 - 1e-9)) {
      step = m * p;
      break;
    }
  }
  if (whole) step = Math.max(1, Math.ceil(step));
  const ticks = [];
  for (let v = 0; v < max + step * (1 - 1e-9); v += step) ticks.push(v);
  if (ticks.length < 2) ticks.push(step);
  return ticks;
}

/**
 * Daily totals as stacked bars, one colour per series, with a legend that gives each series' total. Drawn as SVG
 * (no library, no canvas): a screen reader gets the summary in the figure's name, the table below has the figures.
 * The x axis names days only (UTC days, as the ledger counts them).
 */
export function BarChart(props: { id: string; title: string; days: string[]; series: Series[]; format: (n: number) => string; whole?: boolean }) {
  const { id, title, days, series, format } = props;
  const { lang } = useI18n();
  const box = useRef<HTMLDivElement>(null);
  const [width, setWidth] = useState(600);
  useLayoutEffect(() => {
    const el = box.current!;
    const measure = () => setWidth(Math.max(260, Math.floor(el.clientWidth)));
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  const totals = series.map((s) => s.values.reduce((a, b) => a + b, 0));
  const stacked = days.map((_, i) => series.reduce((a, s) => a + s.values[i], 0));
  const ticks = axis(Math.max(0, ...stacked), props.whole ?? false);
  const top = ticks[ticks.length - 1];
  const plotW = width - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const step = plotW / Math.max(1, days.length);
  const barW = Math.max(1, Math.min(40, step * 0.7));
  const y = (v: number) => PAD.top + plotH - (v / top) * plotH;
  const every = Math.max(1, Math.ceil(days.length / Math.max(2, Math.floor(plotW / 64))));
  const summary = `${title}: ${series.map((s, i) => `${s.label} ${format(totals[i])}`).join(', ')}`;

  return (
    <figure class="chart" id={id}>
      <figcaption>{title}</figcaption>
      <div ref={box} class="plot">
        <svg width={width} height={HEIGHT} viewBox={`0 0 ${width} ${HEIGHT}`} role="img" aria-label={summary}>
          {ticks.map((v) => (
            <g class="grid">
              <line x1={PAD.left} x2={width - PAD.right} y1={y(v)} y2={y(v)} />
              <text x={PAD.left - 6} y={y(v) + 4} text-anchor="end">
                {format(v)}
              </text>
            </g>
          ))}
          {days.map((d, i) => {
            let base = 0;
            const x = PAD.left + i * step + (step - barW) / 2;
            return (
              <g>
                {series.map((s, j) => {
                  const v = s.values[i];
                  if (!v) return null;
                  const y0 = y(base);
                  base += v;
                  return (
                    <rect class="bar" x={x} y={y(base)} width={barW} height={Math.max(0.5, y0 - y(base))} fill={COLORS[j % COLORS.length]}>
                      <title>{`${formatDay(lang, d)} · ${s.label}: ${format(v)}`}</title>
                    </rect>
                  );
                })}
                {i % every === 0 && (
                  <text class="day" x={PAD.left + i * step + step / 2} y={HEIGHT - 8} text-anchor="middle">
                    {formatDay(lang, d)}
                  </text>
                )}
              </g>
            );
          })}
        </svg>
      </div>
      <ul class="legend">
        {series.map((s, i) => (
          <li>
            <svg width="12" height="12" aria-hidden="true" focusable="false">
              <rect width="12" height="12" rx="2" fill={COLORS[i % COLORS.length]} />
            </svg>
            <span class="series">{s.label}</span> <span class="total">{format(totals[i])}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}
