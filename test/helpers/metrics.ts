/**
 * The value of one Prometheus series in a /metrics text: the first line of `name` whose labels include every one
 * of `labels` (undefined when there is none).
 */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const ls = Object.fromEntries([...(m[3] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => ls[k] === v)) return Number(m[4]);
  }
  return undefined;
}
