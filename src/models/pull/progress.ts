/**
 * Progress of a pull for people: in a terminal one line redrawn in place (bar, percent, size, speed, time left);
 * otherwise (a log, a pipe, CI) plain lines, one per 10 % or every 30 s, that read well in a log file.
 */
import { formatBytes, formatDuration } from './format.js';
import type { PullEvent } from './pull.js';

export interface ProgressOutput {
  write(s: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

/** Speed over the last few seconds (bytes/s): what was fetched in this run, not what a resumed file already had. */
class SpeedMeter {
  private samples: Array<[number, number]> = [];
  constructor(private readonly windowMs = 5000) {}
  add(t: number, bytes: number): void {
    this.samples.push([t, bytes]);
    while (this.samples.length > 2 && t - (this.samples[0]?.[0] ?? t) > this.windowMs) this.samples.shift();
  }
  /** undefined until there is a second of data */
  speed(): number | undefined {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (this.samples.length < 2 || !first || !last) return undefined;
    const [t0, b0] = first;
    const [t1, b1] = last;
    if (t1 - t0 < 1000) return undefined;
    return ((b1 - b0) * 1000) / (t1 - t0);
  }
}

export interface ProgressRenderer {
  event(e: PullEvent): void;
  /** ends a redrawn line before other output (errors) */
  end(): void;
}

export function createProgressRenderer(out: ProgressOutput, opts: { now?: () => number; tty?: boolean } = {}): ProgressRenderer {
  const now = opts.now ?? Date.now;
  const tty = opts.tty ?? !!out.isTTY;
  let meter = new SpeedMeter();
  let name = '';
  let lastDraw = -Infinity;
  let lastLineAt = 0;
  let lastStep = -1;
  let open = false;
  let verifyShown = false;

  const line = (s: string) => {
    if (open) out.write('\n');
    open = false;
    out.write(s + '\n');
  };
  const stats = (downloaded: number, total: number) => {
    const speed = meter.speed();
    const left = speed && total > 0 ? (total - downloaded) / speed : undefined;
    return { speed, left };
  };

  return {
    event(e) {
      const t = now();
      switch (e.type) {
        case 'resolving':
          if (!tty) line(`resolving ${e.ref}`);
          break;
        case 'resolved':
          name = e.name;
          meter = new SpeedMeter();
          line(
            `pulling ${e.name} from ${e.source} (${e.size !== undefined ? formatBytes(e.size) : 'size unknown'}${e.sha256 ? ', SHA-256 announced' : ''})` +
              (e.kept > 0 ? `, resuming at ${formatBytes(e.resumeFrom)}${e.kept > e.resumeFrom ? ` (${formatBytes(e.kept)} already downloaded)` : ''}` : ''),
          );
          break;
        case 'progress': {
          meter.add(t, e.downloaded);
          const { speed, left } = stats(e.downloaded, e.total);
          const pct = e.total > 0 ? Math.min(100, (e.downloaded / e.total) * 100) : 0;
          const sizes = e.total > 0 ? `${formatBytes(e.downloaded)} / ${formatBytes(e.total)}` : formatBytes(e.downloaded);
          const speedText = speed !== undefined ? `${formatBytes(speed)}/s` : '-- B/s';
          const leftText = left !== undefined ? `${formatDuration(left)} left` : '--:-- left';
          if (tty) {
            if (t - lastDraw < 100 && e.downloaded < e.total) return;
            lastDraw = t;
            const tail = ` ${pct.toFixed(0).padStart(3)}%  ${sizes}  ${speedText}  ${leftText}`;
            const cols = out.columns && out.columns >= 40 ? out.columns : 80; // 0 or unset: no window size known
            // the bar keeps its width while the numbers after it change length
            const width = Math.max(10, Math.min(40, cols - 60));
            const filled = Math.round((pct / 100) * width);
            out.write(`\r\x1b[K[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]${tail}`.slice(0, cols + 4));
            open = true;
          } else {
            const step = Math.floor(pct / 10);
            if (step === lastStep && t - lastLineAt < 30_000) return;
            lastStep = step;
            lastLineAt = t;
            line(`downloading ${name}: ${pct.toFixed(0)}% (${sizes}, ${speedText}, ${leftText})`);
          }
          break;
        }
        case 'stalled':
          // a line of its own, also on a terminal (the bar resumes below it)
          if (open) out.write('\n');
          open = false;
          line(
            `${name}: nothing arrived for ${formatDuration(e.stalledMs / 1000)} at ${formatBytes(e.downloaded)}${e.total > 0 ? ` of ${formatBytes(e.total)}` : ''}; the transfer is cut and resumed (try ${e.attempt} of ${e.attempts})`,
          );
          break;
        case 'verifying':
          if (!verifyShown) {
            verifyShown = true;
            line(`verifying ${name} (${formatBytes(e.total)}, SHA-256)`);
          }
          break;
        case 'done':
          // the command prints the outcome itself (on stdout)
          break;
      }
    },
    end() {
      if (open) out.write('\n');
      open = false;
    },
  };
}
