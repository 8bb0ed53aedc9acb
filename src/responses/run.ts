/**
 * Running a prepared response in the request that asked for it: as one JSON object, or as a stream of events.
 * Both fold the engine's events into one ResponseBuilder; both store the response before charging it, and both
 * charge what a client that left was already sent.
 */
import type { FastifyBaseLogger } from 'fastify';
import { AppError } from '../platform/errors.js';
import { AsyncChannel } from '../platform/async-channel.js';
import type { GenerateEvent, GenerateRequest, Usage } from '../engines/types.js';
import type { RequestFacts } from '../platform/ops/facts.js';
import type { Metering } from '../api/metering.js';
import { fromEngineError } from '../api/engine-errors.js';
import { OutputCount, type Admission, type Hold } from '../api/admission.js';
import { ResponseBuilder, cacheWritesOf, toUsage, type StreamEvent } from './builder.js';
import { outputText, spokenCharacters, type ResponseObject } from './object.js';
import type { ResponseStore } from './store.js';
import type { Prepared } from './prepare.js';
import { SpokenAnswer, type AnswerSpeaker } from './speech.js';

export interface RunDeps {
  store: ResponseStore;
  /** prices and records usage (src/api/metering.ts) */
  metering: Metering;
  log: FastifyBaseLogger;
  /** speaks answers asked for with modalities audio */
  speaker?: AnswerSpeaker;
  /** reservations at admission (billing, TPM limits); without it nothing is reserved */
  admission?: Admission;
}

/**
 * The usage operations of the Responses API (declared by the module): a response's tokens, and a spoken answer's
 * characters under the speech model, as /v1/audio/speech records them.
 */
export const RESPONSES_OPERATIONS = { responses: 'responses', speech: 'speech' } as const;

/** The events that end a stream (held back until the response is stored and charged). */
export function isFinal(type: string) {
  return type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed' || type === 'error';
}

/** The SDKs add output_text themselves; plain HTTP clients get it too (as OpenAI's SDK-facing object has it). */
export function withOutputText(r: ResponseObject): ResponseObject {
  return { ...r, output_text: outputText(r.output) };
}

const noop = () => {};

export class Runner {
  constructor(private readonly d: RunDeps) {}

  /** stream false, background false: the finished object. */
  async json(p: Prepared, signal: AbortSignal): Promise<ResponseObject> {
    const builder = ResponseBuilder.quiet(p.response, { maxToolCalls: p.req.max_tool_calls });
    builder.start();
    let final: ResponseObject;
    try {
      try {
        // nothing is shown before the end: the engine may fetch the answer whole (no upstream event stream)
        ({ final } = await this.execute(p, builder, signal, noop, true));
      } catch (e) {
        if (signal.aborted) await this.chargeLeft(p, builder.response);
        throw e;
      }
      await this.finishRecord(p, final);
    } finally {
      p.hold?.release();
    }
    // not stored: nothing else holds the object, so it gets output_text itself (no copy of it is made)
    if (!p.store) {
      final.output_text = outputText(final.output);
      return final;
    }
    return withOutputText(final);
  }

  /**
   * stream true (not background): the events in order. Nothing comes out before the engine's first event, so a
   * request the engine refuses at once makes the first read throw (the route answers a plain HTTP error). The
   * final event comes out only after the response is stored and charged: a client that saw
   * `response.completed` can rely on both; if storing fails, the stream ends as failed instead.
   */
  stream(p: Prepared, signal: AbortSignal): AsyncIterable<StreamEvent> {
    // the reader is woken at once when its client leaves; a server that stops the stream (an AppError as the
    // reason: shutdown past its grace) still gets the stream's end written (below)
    const left = new AbortController();
    const onAbort = () => {
      if (!(signal.reason instanceof AppError)) left.abort(signal.reason);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const out = new AsyncChannel<StreamEvent>({ signal: left.signal });
    let started = false;
    const early: StreamEvent[] = [];
    const held: StreamEvent[] = [];
    const emit = (e: StreamEvent) => {
      if (!started) early.push(e);
      else if (isFinal(e.type)) held.push(e);
      else out.push(e);
    };
    const builder = new ResponseBuilder(p.response, emit, { maxToolCalls: p.req.max_tool_calls });
    builder.start();
    const onStart = () => {
      started = true;
      for (const e of early.splice(0)) emit(e);
    };
    // runs on after a client that left stopped reading: the request is written once it has charged (facts.keep)
    const run = async () => {
      let final: ResponseObject;
      try {
        ({ final } = await this.execute(p, builder, signal, onStart));
      } catch (e) {
        const stopped = started && signal.aborted && signal.reason instanceof AppError ? signal.reason : undefined;
        if (stopped === undefined) {
          // the client left mid-stream: what it was sent is charged
          if (signal.aborted) await this.chargeLeft(p, builder.response);
          out.fail(e);
          return;
        }
        // the server stopped the stream (shutdown past its grace) after output: it ends as any failure after
        // output does (error, then response.failed), stored and charged, so GET /v1/responses/{id} finds it
        if (p.facts) {
          p.facts.errorCode ??= stopped.code;
          p.facts.errorMessage ??= stopped.message;
        }
        final = builder.fail(stopped.code, stopped.message);
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
      try {
        await this.finishRecord(p, final);
      } catch (e) {
        // the final event was held back: take it back and end as failed instead (error, then response.failed)
        builder.rewind(held.length);
        held.length = 0;
        const { code, message } = fromEngineError(e);
        builder.redirect((ev) => out.push(ev));
        builder.fail(code === 'validation_error' ? 'server_error' : code, message);
        out.end();
        return;
      }
      for (const e of held.splice(0)) out.push(e);
      out.end();
    };
    const running = (async () => {
      try {
        await run();
      } finally {
        // whatever the record did not settle (no record: refused, failed before output) is given back
        p.hold?.release();
      }
    })();
    p.facts?.keep(running);
    return out;
  }

  /**
   * Runs the generation, folding events into the builder. The first engine event is awaited before
   * `onStart` is called, so a request the engine refuses at once (bad upstream request, unreachable
   * upstream) fails with a plain HTTP error instead of a half-started response. `whole`: the caller uses
   * nothing before the end, so the engine is told it need not stream (a spoken answer streams all the same:
   * its speech starts with the first sentence).
   */
  async execute(p: Prepared, builder: ResponseBuilder, signal: AbortSignal, onStart: () => void, whole = false): Promise<{ final: ResponseObject; usage?: Usage }> {
    // a spoken answer whose speech engine fails stops the model too
    const voice = p.audio && this.d.speaker ? new SpokenAnswer(builder, this.d.speaker, p.audio, signal) : undefined;
    const facts = p.facts;
    if (this.d.admission !== undefined && p.hold === undefined) await this.admit(p);
    facts?.engineStarted();
    const stop = voice ? new AbortController() : undefined;
    // the request is this run's own (prepared for it): its signal and mode are set on it, not on a copy
    const gen: GenerateRequest = p.gen;
    gen.signal = voice ? AbortSignal.any([signal, stop!.signal]) : signal;
    if (whole && !voice) gen.stream = false;
    const it = p.engine.generate(gen)[Symbol.asyncIterator]();
    let first: IteratorResult<GenerateEvent>;
    try {
      first = await it.next();
    } catch (e) {
      if (signal.aborted) throw e;
      facts?.failed(e);
      throw fromEngineError(e);
    }
    facts?.firstOutput();
    onStart();
    try {
      return await this.consume(it, first, builder, signal, voice, stop, facts, p.hold);
    } finally {
      voice?.close();
      // let the engine release what it holds (its generator is suspended at the done event)
      void Promise.resolve(it.return?.()).catch(() => {});
    }
  }

  /**
   * Reserves the worst case (the input as counted, the most output it may produce, at the model's price) before
   * the engine is called: refused with 429 saying the reservation, before anything is sent. Nothing when no
   * budget or TPM limit applies to the key.
   */
  private async admit(p: Prepared): Promise<void> {
    const a = this.d.admission;
    if (!a || p.hold || !a.applies(p.key)) return;
    const input = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools });
    const output = a.outputCap(p.gen.maxOutputTokens, input, p.engine.contextWindow ?? p.spec.context_window);
    p.hold = await a.reserve(p.key, p.spec, input, output);
  }

  /**
   * Folds the engine's events into the builder. A spoken answer (`voice`) is given the text as it arrives; its
   * audio comes back while the model writes on, and it is finished (all of it spoken) before anything that ends
   * the message is taken. A speech engine that fails fails the response, and stops the model (`stop`).
   */
  private async consume(
    it: AsyncIterator<GenerateEvent>,
    ev: IteratorResult<GenerateEvent>,
    builder: ResponseBuilder,
    signal: AbortSignal,
    voice?: SpokenAnswer,
    stop?: AbortController,
    facts?: RequestFacts,
    hold?: Hold,
  ): Promise<{ final: ResponseObject; usage?: Usage }> {
    const count = hold ? new OutputCount() : undefined;
    try {
      while (!ev.done) {
        // an engine may finish normally after an abort (with the usage so far): the abort wins
        if (signal.aborted) throw signal.reason ?? new Error('aborted');
        const e = ev.value;
        // output past what the request reserved (an upstream that ignores max_output_tokens, a request that named
        // none): stopped before it is shown, incomplete as at the token cap; charged the input and what was shown
        // (estimated), at most the reservation
        if (count && (e.type === 'text_delta' || e.type === 'reasoning_delta' || e.type === 'tool_call_delta') && count.add(e.delta, hold!.outputLimit)) {
          stop?.abort();
          if (voice) await voice.finish();
          facts?.engineEnded();
          const usage = { inputTokens: hold!.inputTokens, outputTokens: count.tokens };
          return { final: builder.stopAt('max_output_tokens', usage), usage };
        }
        if (voice && e.type !== 'text_delta') await voice.finish();
        if (e.type === 'done') {
          // the response keeps the model name the client sent, whatever the engine calls it (docs/models.md)
          facts?.engineEnded();
          return { final: builder.finish(e.finishReason, e.usage), usage: e.usage };
        }
        builder.handle(e);
        if (voice && e.type === 'text_delta') voice.text(e.delta);
        ev = voice ? await Promise.race([it.next(), voice.failed]) : await it.next();
      }
      // the engine ended without a done event
      if (facts) {
        facts.failed(new Error('the model engine ended without finishing the response'));
        facts.errorCode ??= 'engine_error';
        facts.errorMessage ??= 'the model engine ended without finishing the response';
      }
      return { final: builder.fail('engine_error', 'the model engine ended without finishing the response') };
    } catch (e) {
      if (signal.aborted) throw e;
      stop?.abort();
      const { code, message } = fromEngineError(e);
      // the response ends as failed (not an HTTP error): its facts say so for the log line and the error series
      if (facts) {
        facts.failed(e);
        facts.errorCode ??= code === 'validation_error' ? 'engine_error' : code;
        facts.errorMessage ??= message;
      }
      return { final: builder.fail(code === 'validation_error' ? 'engine_error' : code, message) };
    }
  }

  /**
   * Records the usage of a response. One that ended without the engine's usage (the client left, a cancel, a
   * failure) but produced output is charged by estimate: input counted by the engine, output ~4 characters a
   * token (so leaving before the last event is not a way to get an answer for free).
   */
  async recordUsage(p: Prepared, final: ResponseObject): Promise<void> {
    let u = final.usage;
    if (!u && final.output.length > 0) {
      let chars = 0;
      for (const o of final.output) {
        if (o.type === 'message') for (const c of o.content) chars += c.type === 'output_text' ? c.text.length : 0;
        else if (o.type === 'function_call') chars += o.name.length + o.arguments.length;
        else for (const c of o.content) chars += c.text.length;
      }
      const input = await p.engine.countTokens({ model: p.gen.model, messages: p.gen.messages, tools: p.gen.tools }).catch(() => 0);
      u = toUsage({ inputTokens: input, outputTokens: Math.max(1, Math.ceil(chars / 4)) });
    }
    if (u) {
      const metered = {
        inputTokens: u.input_tokens,
        outputTokens: u.output_tokens,
        cachedTokens: u.input_tokens_details.cached_tokens,
        ...(final.usage ? cacheWritesOf(final) : {}),
      };
      await this.d.metering.charge({
        requestId: p.requestId,
        key: p.key,
        spec: p.spec,
        operation: RESPONSES_OPERATIONS.responses,
        used: metered,
        deployment: p.gen.route?.deployment,
        hold: p.hold,
        facts: p.facts,
      });
    }
    // a spoken answer is speech usage too: the characters the voice was given, under the speech model and its price
    const characters = p.audio && this.d.speaker ? spokenCharacters(final.output) : 0;
    if (characters > 0) {
      const spec = this.d.speaker!.speechModel();
      await this.d.metering.charge({ requestId: p.requestId, key: p.key, spec, operation: RESPONSES_OPERATIONS.speech, used: { units: { characters } }, facts: p.facts });
    }
  }

  /** The client left before the end: charge what it was sent; a failure to record is logged, not thrown. */
  private async chargeLeft(p: Prepared, sofar: ResponseObject) {
    await this.recordUsage(p, sofar).catch((e) => this.d.log.error({ err: (e as Error).message, id: p.id }, 'usage of a response whose client left not recorded'));
  }

  /**
   * Stores the response, then records its usage. In that order a database that is away fails the request
   * (503, which clients retry) before anything is charged; the usage record itself goes to the local journal,
   * which does not depend on the database.
   */
  private async finishRecord(p: Prepared, final: ResponseObject) {
    if (p.store) {
      await this.d.store.insert({ id: p.id, userId: p.key.userId, orgId: p.key.orgId, keyId: p.key.keyId, object: final, inputItems: p.inputItems, request: null });
      if (p.facts) p.facts.responseId = p.id;
    }
    try {
      await this.recordUsage(p, final);
    } catch (e) {
      if (!p.store) throw e;
      // the response is stored: a retry would make a second one, so tell the SDKs not to retry this error
      this.d.log.error({ err: (e as Error).message, id: p.id }, 'usage not recorded for a stored response');
      throw new AppError('service_unavailable', `the response ${p.id} was stored but its usage could not be recorded; retrieve it instead of retrying`, null, {
        headers: { 'x-should-retry': 'false' },
      });
    }
  }
}
