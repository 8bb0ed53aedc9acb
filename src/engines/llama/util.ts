import { randomBytes } from 'node:crypto';

export function newCallId(): string {
  return 'call_' + randomBytes(12).toString('base64url');
}

export function abortError(signal?: AbortSignal): Error {
  const reason = signal?.reason;
  if (reason instanceof Error) return reason;
  const e = new Error(typeof reason === 'string' ? reason : 'The operation was aborted');
  e.name = 'AbortError';
  return e;
}

/**
 * Splits streamed text into reasoning and answer at literal <think> / </think> tags, for models whose chat wrapper
 * does not report thought segments itself. A tag split across chunks is held back until it can be decided.
 */
export class ThinkTagSplitter {
  private buf = '';
  constructor(public inThought: boolean) {}

  push(text: string, out: (kind: 'reasoning' | 'text', s: string) => void): void {
    this.buf += text;
    for (;;) {
      const tag = this.inThought ? '</think>' : '<think>';
      const i = this.buf.indexOf(tag);
      if (i >= 0) {
        if (i > 0) out(this.inThought ? 'reasoning' : 'text', this.buf.slice(0, i));
        this.buf = this.buf.slice(i + tag.length);
        this.inThought = !this.inThought;
        continue;
      }
      // keep a possible partial tag at the end
      let keep = 0;
      for (let k = Math.min(tag.length - 1, this.buf.length); k > 0; k--) {
        if (tag.startsWith(this.buf.slice(this.buf.length - k))) {
          keep = k;
          break;
        }
      }
      const emit = this.buf.slice(0, this.buf.length - keep);
      if (emit) out(this.inThought ? 'reasoning' : 'text', emit);
      this.buf = this.buf.slice(this.buf.length - keep);
      return;
    }
  }

  flush(out: (kind: 'reasoning' | 'text', s: string) => void): void {
    if (this.buf) out(this.inThought ? 'reasoning' : 'text', this.buf);
    this.buf = '';
  }
}

/**
 * Incremental reader of the forced tool-call protocol: `{"name": "...", "arguments": {...}}` or an array of those.
 * Reports each call as soon as its name is known, streams the raw arguments text, and ends it when the arguments
 * object closes.
 */
interface ScannedCall {
  callId: string;
  name: string;
  arguments: string;
  complete: boolean;
}

export class ToolCallScanner {
  private depth = 0;
  private inString = false;
  private escape = false;
  private strBuf = '';
  private strDepth = -1;
  private pendingKey: string | undefined;
  private expectValueFor: string | undefined;
  private name: string | undefined;
  private inArgs = false;
  private argsBuf = '';
  private argsEmitted = 0;
  /** the call whose arguments are being scanned (the last of `calls`) */
  private current: ScannedCall | undefined;
  readonly calls: ScannedCall[] = [];

  constructor(
    private readonly parallel: boolean,
    private readonly emit: {
      start(callId: string, name: string): void;
      delta(callId: string, delta: string): void;
      /** `incomplete`: the generation ended inside the arguments (the token cap, a stop sequence) */
      end(callId: string, args: string, incomplete?: boolean): void;
    },
  ) {}

  private get level(): number {
    return this.parallel ? 2 : 1;
  }

  push(text: string): void {
    for (const ch of text) this.char(ch);
    this.flushDelta();
  }

  private flushDelta() {
    if (this.inArgs && this.current && this.argsBuf.length > this.argsEmitted) {
      this.emit.delta(this.current.callId, this.argsBuf.slice(this.argsEmitted));
      this.argsEmitted = this.argsBuf.length;
    }
  }

  private char(ch: string) {
    if (this.inArgs) this.argsBuf += ch;
    if (this.inString) {
      if (this.depth === this.level && !this.inArgs) this.strBuf += ch;
      if (this.escape) this.escape = false;
      else if (ch === '\\') this.escape = true;
      else if (ch === '"') {
        this.inString = false;
        if (this.strDepth === this.level && !this.inArgs) this.stringDone(this.strBuf);
      }
      return;
    }
    if (ch === '"') {
      this.inString = true;
      this.strBuf = '"';
      this.strDepth = this.depth;
      if (this.expectValueFor === 'arguments' && this.depth === this.level && !this.inArgs) this.startArgs(ch);
      return;
    }
    if (ch === '{' || ch === '[') {
      if (this.expectValueFor === 'arguments' && this.depth === this.level && !this.inArgs) this.startArgs(ch);
      this.depth++;
      return;
    }
    if (ch === '}' || ch === ']') {
      this.depth--;
      if (this.inArgs && this.depth === this.level) this.endArgs();
      if (this.depth === this.level - 1) this.resetCall();
      return;
    }
    if (this.depth !== this.level || this.inArgs) return;
    if (ch === ':') this.expectValueFor = this.pendingKey;
    else if (ch === ',') this.expectValueFor = undefined;
    else if (!/\s/.test(ch) && this.expectValueFor === 'arguments') this.startArgs(ch); // primitive arguments (not produced by our grammar)
  }

  private stringDone(raw: string) {
    let value: string;
    try {
      value = JSON.parse(raw) as string;
    } catch {
      value = raw.slice(1, -1);
    }
    if (this.expectValueFor === 'name') {
      this.name = value;
      this.expectValueFor = undefined;
    } else if (this.expectValueFor === undefined) this.pendingKey = value;
  }

  private startArgs(first: string) {
    this.inArgs = true;
    this.argsBuf = first;
    this.argsEmitted = 0;
    const call: ScannedCall = { callId: newCallId(), name: this.name ?? '', arguments: '', complete: false };
    this.current = call;
    this.calls.push(call);
    this.emit.start(call.callId, call.name);
  }

  private endArgs() {
    this.flushDelta();
    this.inArgs = false;
    this.expectValueFor = undefined;
    const call = this.current;
    this.current = undefined;
    if (!call) return;
    call.arguments = this.argsBuf;
    call.complete = true;
    this.emit.end(call.callId, this.argsBuf);
  }

  private resetCall() {
    this.name = undefined;
    this.pendingKey = undefined;
    this.expectValueFor = undefined;
  }

  /** Ends a call cut short (e.g. by the token limit) with what was generated. */
  finish(): void {
    if (this.inArgs && this.current) {
      this.flushDelta();
      const call = this.current;
      call.arguments = this.argsBuf;
      this.emit.end(call.callId, this.argsBuf, true);
      this.inArgs = false;
      this.current = undefined;
    }
  }
}
