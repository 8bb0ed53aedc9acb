/**
 * Incremental Server-Sent Events parser (WHATWG rules): input may be split anywhere, lines end in LF, CRLF or
 * a lone CR, `:` lines are comments, `data:` lines of one event are joined with LF, an empty line dispatches.
 * Allocation-light: one string concatenation per network chunk, one callback per event.
 */
export class SseParser {
  private buf = '';
  /** the previous chunk ended in CR: a LF at the start of the next one belongs to it */
  private skipLF = false;
  private data = '';
  private hasData = false;
  private event = '';

  constructor(private readonly onEvent: (data: string, event: string) => void) {}

  push(chunk: string): void {
    const s = this.buf.length ? this.buf + chunk : chunk;
    let pos = 0;
    if (this.skipLF) {
      this.skipLF = false;
      if (s.charCodeAt(0) === 10) pos = 1;
    }
    const hasCR = s.indexOf('\r', pos) !== -1;
    const len = s.length;
    while (pos < len) {
      let end = s.indexOf('\n', pos);
      let next: number;
      if (hasCR) {
        const cr = s.indexOf('\r', pos);
        if (cr !== -1 && (end === -1 || cr < end)) {
          end = cr;
          if (cr + 1 < len) next = s.charCodeAt(cr + 1) === 10 ? cr + 2 : cr + 1;
          else {
            next = len;
            this.skipLF = true;
          }
        } else next = end + 1;
      } else next = end + 1;
      if (end === -1) break;
      this.line(s, pos, end);
      pos = next;
    }
    this.buf = pos < len ? s.slice(pos) : '';
  }

  /** end of input: a pending event without its final empty line is still dispatched */
  end(): void {
    if (this.buf.length) {
      const s = this.buf;
      this.buf = '';
      this.line(s, 0, s.length);
    }
    this.dispatch();
  }

  private line(s: string, start: number, end: number): void {
    if (start === end) return this.dispatch();
    const c = s.charCodeAt(start);
    if (c === 58 /* : */) return; // comment
    // fast path for the overwhelmingly common "data: ..." line
    if (c === 100 && s.startsWith('data:', start)) {
      const v = s.charCodeAt(start + 5) === 32 ? start + 6 : start + 5;
      const value = s.slice(v, end);
      if (this.hasData) this.data += '\n' + value;
      else {
        this.data = value;
        this.hasData = true;
      }
      return;
    }
    const colon = s.indexOf(':', start);
    let field: string;
    let value: string;
    if (colon === -1 || colon >= end) {
      field = s.slice(start, end);
      value = '';
    } else {
      field = s.slice(start, colon);
      value = s.slice(s.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1, end);
    }
    if (field === 'event') this.event = value;
    else if (field === 'data') {
      this.data = this.hasData ? this.data + '\n' + value : value;
      this.hasData = true;
    }
    // id, retry and unknown fields are ignored
  }

  private dispatch(): void {
    // an event whose data is empty is not dispatched (WHATWG)
    if (!this.hasData || this.data === '') {
      this.hasData = false;
      this.event = '';
      return;
    }
    const data = this.data;
    const event = this.event;
    this.data = '';
    this.hasData = false;
    this.event = '';
    this.onEvent(data, event);
  }
}
