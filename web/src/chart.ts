import uPlot from 'uplot';

export interface Series {
  label: string;
  values: number[];
}

const COLORS = ['#2563eb', '#db2777', '#059669', '#d97706', '#7c3aed', '#0891b2', '#dc2626', '#4b5563'];

/** Draws days x series as bars-like stepped lines with uPlot; follows the box's width. Returns a disposer. */
export function drawChart(box: HTMLElement, days: string[], series: Series[]): () => void {
  const xs = days.map((d) => {
    // noon UTC of each (UTC) day
    return Date.parse(`${d}T12:00:00Z`) / 1000;
  });
  const width = () => Math.max(260, box.clientWidth);
  const plot = new uPlot(
    {
      width: width(),
      height: 200,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [{}, { size: 56 }],
      series: [
        {},
        ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2, fill: COLORS[i % COLORS.length] + '22', points: { show: days.length <= 45 } })),
      ],
    },
    [xs, ...series.map((s) => s.values)],
    box,
  );
  const ro = new ResizeObserver(() => plot.setSize({ width: width(), height: 200 }));
  ro.observe(box);
  return () => {
    ro.disconnect();
    plot.destroy();
  };
}
