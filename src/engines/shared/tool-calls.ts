import type { GenerateEvent } from '../types.js';
import { randomBytes } from 'node:crypto';

interface Entry {
  id: string;
  name: string;
  args: string;
  /** tool_call_start was emitted */
  started: boolean;
  ended: boolean;
  /** the upstream said this call is complete (Responses output_item.done) */
  complete: boolean;
  /** dropped because parallel tool calls are off and this is not the first call */
  ignored: boolean;
  /** cut by the token cap: ended as incomplete, with the arguments that were written */
  cut: boolean;
}

export function newCallId(): string {
  return 'call_' + randomBytes(12).toString('base64url');
}

/**
 * Turns upstream tool-call pieces (keyed by index / output_index, possibly interleaved) into well-formed
 * start / delta* / end sequences, one call at a time. The first call is streamed live; calls that appear while
 * another is open are buffered and emitted whole once the live one is known to be finished (at the latest when
 * the upstream finishes). `onlyFirst` keeps only the first call (parallel_tool_calls: false).
 */
export class ToolCallAssembler {
  private readonly entries = new Map<number | string, Entry>();
  private live: Entry | undefined;
  /** calls emitted (or being emitted), ignored ones excluded */
  count = 0;
  /** characters of arguments received, for usage estimates */
  chars = 0;
  /** the call the upstream wrote to last (text written after it clears it): the one a token cap cuts */
  private writing: Entry | undefined;

  constructor(
    private readonly out: GenerateEvent[],
    private readonly onlyFirst: boolean,
  ) {}

  add(key: number | string, id: string | undefined, name: string | undefined, piece: string | undefined): void {
    let e = this.entries.get(key);
    if (!e) {
      e = { id: id || '', name: name || '', args: '', started: false, ended: false, complete: false, ignored: this.onlyFirst && this.count > 0, cut: false };
      this.entries.set(key, e);
      if (!e.ignored) this.count++;
    } else {
      if (id && !e.id) e.id = id;
      if (name && !e.name) e.name = name;
    }
    this.writing = e;
    if (e.ignored || e.ended) return;
    if (piece) {
      e.args += piece;
      this.chars += piece.length;
    }
    if (this.live === undefined) this.live = e;
    if (e !== this.live) return;
    if (!e.started) {
      if (!e.name) return; // wait for the name before starting
      this.start(e);
    } else if (piece) this.out.push({ type: 'tool_call_delta', callId: e.id, delta: piece });
  }

  /** Authoritative full arguments (Responses `.done` events). */
  setArguments(key: number | string, full: string): void {
    const e = this.entries.get(key);
    if (!e || e.ignored || e.ended || typeof full !== 'string') return;
    if (e === this.live && e.started && full.length > e.args.length && full.startsWith(e.args)) {
      this.out.push({ type: 'tool_call_delta', callId: e.id, delta: full.slice(e.args.length) });
    }
    e.args = full;
  }

  /** The upstream says this call is complete. */
  complete(key: number | string): void {
    const e = this.entries.get(key);
    if (!e || e.ignored) return;
    e.complete = true;
    if (e === this.live) {
      this.end(e);
      this.live = undefined;
      this.promote();
    }
  }

  /** The upstream wrote something else (text): the calls before it were finished. */
  otherOutput(): void {
    this.writing = undefined;
  }

  /** The upstream says this call was cut short (Responses: its output_item.done has status incomplete). */
  markCut(key: number | string): void {
    const e = this.entries.get(key);
    if (e) e.cut = true;
  }

  /**
   * The upstream finished: every call is complete, except, when the token cap ended it (`cut`), the call it
   * was writing (unless the upstream itself said that one was complete).
   */
  finishAll(cut = false): void {
    if (cut && this.writing && !this.writing.complete) this.writing.cut = true;
    for (const e of this.entries.values()) e.complete = true;
    if (this.live) {
      this.end(this.live);
      this.live = undefined;
    }
    this.promote();
  }

  /** After the live call ended: flush complete buffered calls in order, the first incomplete one goes live. */
  private promote(): void {
    for (const e of this.entries.values()) {
      if (e.ignored || e.ended) continue;
      if (!e.complete) {
        this.live = e;
        if (e.name) this.start(e);
        return;
      }
      this.end(e);
    }
  }

  private start(e: Entry): void {
    if (!e.id) e.id = newCallId();
    e.started = true;
    this.out.push({ type: 'tool_call_start', callId: e.id, name: e.name });
    if (e.args) this.out.push({ type: 'tool_call_delta', callId: e.id, delta: e.args });
  }

  private end(e: Entry): void {
    if (!e.started) this.start(e);
    if (e.cut) {
      // what was written, as it was: a cut call is not passed off as complete (no "{}" filler either)
      e.ended = true;
      this.out.push({ type: 'tool_call_end', callId: e.id, arguments: e.args, incomplete: true });
      return;
    }
    if (!e.args) {
      // a call without arguments: OpenAI sends "{}", so do we (and the deltas add up to the final text)
      e.args = '{}';
      this.out.push({ type: 'tool_call_delta', callId: e.id, delta: '{}' });
    }
    e.ended = true;
    this.out.push({ type: 'tool_call_end', callId: e.id, arguments: e.args });
  }
}
