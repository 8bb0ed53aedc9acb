/**
 * Reading an engine's events in the engine-level tests (test/engines/*): all of them, or up to the EngineError the
 * generation fails with; the text, the reasoning, the one final `done`; the tool calls, checked against the events'
 * grammar (start, deltas, end, one call at a time, the deltas adding up to the arguments, none open at `done`).
 */
import assert from 'node:assert/strict';
import { EngineError, type GenerateEvent } from '../../src/engines/types.js';

export async function collect(it: AsyncIterable<GenerateEvent>): Promise<GenerateEvent[]> {
  const out: GenerateEvent[] = [];
  for await (const e of it) out.push(e);
  return out;
}

export async function failure(it: AsyncIterable<GenerateEvent>): Promise<{ events: GenerateEvent[]; error: EngineError }> {
  const events: GenerateEvent[] = [];
  try {
    for await (const e of it) events.push(e);
  } catch (err) {
    assert.ok(err instanceof EngineError, `expected EngineError, got ${err}`);
    return { events, error: err };
  }
  assert.fail('expected the generation to fail');
}

export const text = (evs: GenerateEvent[]) => evs.flatMap((e) => (e.type === 'text_delta' ? [e.delta] : [])).join('');
export const reasoning = (evs: GenerateEvent[]) => evs.flatMap((e) => (e.type === 'reasoning_delta' ? [e.delta] : [])).join('');

/** the last event, which is the only `done` */
export const done = (evs: GenerateEvent[]) => {
  const d = evs[evs.length - 1]!;
  assert.equal(d.type, 'done');
  assert.equal(evs.filter((e) => e.type === 'done').length, 1);
  return d as Extract<GenerateEvent, { type: 'done' }>;
};

export function toolCalls(evs: GenerateEvent[]) {
  const calls: { callId: string; name: string; arguments: string; incomplete?: boolean }[] = [];
  let open: { callId: string; name: string; acc: string } | undefined;
  for (const e of evs) {
    if (e.type === 'tool_call_start') {
      assert.equal(open, undefined, 'a call started while another is open');
      open = { callId: e.callId, name: e.name, acc: '' };
    } else if (e.type === 'tool_call_delta') {
      assert.equal(e.callId, open?.callId);
      open!.acc += e.delta;
    } else if (e.type === 'tool_call_end') {
      assert.equal(e.callId, open?.callId);
      assert.equal(e.arguments, open!.acc, 'deltas add up to the final arguments');
      calls.push({ callId: e.callId, name: open!.name, arguments: e.arguments, ...(e.incomplete ? { incomplete: true } : {}) });
      open = undefined;
    } else if (e.type === 'done') assert.equal(open, undefined, 'done while a call is open');
  }
  return calls;
}
