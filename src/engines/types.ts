/**
 * The small interfaces every engine implements. Engines never know HTTP: they take plain requests
 * and an AbortSignal, and give back data or async iterables of events. Services (src/responses,
 * src/audio) turn these into wire formats.
 */

// ---------------------------------------------------------------- text generation

export type ChatRole = 'system' | 'developer' | 'user' | 'assistant' | 'tool';

export type ChatContentPart = { type: 'text'; text: string } | { type: 'image_url'; url: string; detail?: 'auto' | 'low' | 'high' };

export interface ChatToolCall {
  callId: string;
  name: string;
  /** JSON text */
  arguments: string;
}

/** One normalized conversation entry, built by the responses service from instructions, history and input. */
export interface ChatMessage {
  role: ChatRole;
  content: string | ChatContentPart[];
  name?: string;
  /** assistant messages: calls the model made (followed by role 'tool' messages with toolCallId) */
  toolCalls?: ChatToolCall[];
  /** tool messages: which call this output answers */
  toolCallId?: string;
  /** assistant messages: reasoning text the model produced before its answer */
  reasoning?: string;
}

export interface FunctionTool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments */
  parameters?: Record<string, unknown>;
  strict?: boolean;
}

export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; name: string };

export type TextFormat =
  { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; name: string; schema: Record<string, unknown>; strict?: boolean; description?: string };

export interface GenerateRequest {
  /** the model name the engine should use upstream (already mapped from the client's name) */
  model: string;
  messages: ChatMessage[];
  tools?: FunctionTool[];
  toolChoice?: ToolChoice;
  /** false: at most one tool call */
  parallelToolCalls?: boolean;
  format?: TextFormat;
  temperature?: number;
  topP?: number;
  maxOutputTokens?: number;
  stop?: string[];
  /** -2..2: lowers the odds of tokens already present in the output (OpenAI's definition); unset = the engine's default */
  presencePenalty?: number;
  /** -2..2: lowers the odds of tokens in proportion to how often they already appear in the output */
  frequencyPenalty?: number;
  /** the most tool calls the response may make: an engine that can stops generating once it is reached */
  maxToolCalls?: number;
  reasoningEffort?: string;
  /**
   * the reasoning budget in tokens the client named (Anthropic's thinking.budget_tokens, with reasoningEffort the
   * effort that holds it): an engine whose upstream takes a budget sends this one, not its effort's figure
   */
  reasoningBudget?: number;
  /** sampling seed: the same seed, input and parameters give the same output where the engine can (OpenAI's `seed`) */
  seed?: number;
  /** stable id of the conversation prefix (e.g. previous response id) so engines can reuse a KV cache */
  cacheKey?: string;
  /** id under which this generation's state may be kept for a later request that continues it */
  saveKey?: string;
  /**
   * false: the caller folds the whole answer before it uses any of it (a non-streaming response). An engine
   * behind an HTTP upstream may then ask for one JSON answer instead of an event stream; the events it yields
   * are the same. Unset or true: the events as they come.
   */
  stream?: boolean;
  signal?: AbortSignal;
  /** filled by the router as it tries deployments (which one served): the usage record names it */
  route?: RouteNote;
}

/** What the router (src/models/router) says of a request it routed; the feature that made the request reads it. */
export interface RouteNote {
  /** the deployment that served (or was last tried) */
  deployment?: string;
  /** the fallback model that served, when the requested one could not */
  fallback?: string;
  /** how many tries were made */
  tries?: number;
}

export interface Usage {
  /** every input token: read afresh, read from a prompt cache, and written to one */
  inputTokens: number;
  outputTokens: number;
  /** the part of inputTokens read from a prompt cache */
  cachedTokens?: number;
  /** the part of inputTokens written to a prompt cache (whatever its lifetime) */
  cacheWriteTokens?: number;
  /** the part of cacheWriteTokens written to a one-hour cache (the rest: the default, five minutes) */
  cacheWrite1hTokens?: number;
  reasoningTokens?: number;
}

/** `content_filter`: the upstream refused to answer, or stopped, on its safety grounds (Anthropic's `refusal`) */
export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/** Events in order. Tool calls: start, zero or more deltas, end, each call finished before the next starts. */
export type GenerateEvent =
  | { type: 'reasoning_delta'; delta: string }
  | { type: 'text_delta'; delta: string }
  | { type: 'tool_call_start'; callId: string; name: string }
  | { type: 'tool_call_delta'; callId: string; delta: string }
  /** `incomplete`: the call was cut by the token cap (its arguments are what was generated, usually not valid JSON) */
  | { type: 'tool_call_end'; callId: string; arguments: string; incomplete?: boolean }
  | { type: 'done'; finishReason: FinishReason; usage: Usage; model?: string };

export interface TextEngine {
  readonly kind: string;
  /** context window in tokens, when known */
  readonly contextWindow?: number;
  generate(req: GenerateRequest): AsyncIterable<GenerateEvent>;
  /** where an embedded engine runs (CPU, GPU) and how long it took to load, for the start log */
  info?(): { device: string; loadMs?: number };
  /** exact (or best-effort for upstreams) token count of a conversation as the model would see it */
  countTokens(req: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>): Promise<number>;
  /**
   * Chat Completions pass-through, for engines whose upstream speaks Chat Completions itself: the client's body
   * (its model name already mapped) is forwarded as it is, and the upstream's answer comes back as it is: one
   * JSON object (`stream` false), or each chunk of the stream in order (`stream` true; `[DONE]` is not
   * yielded). A refusal before the first value is thrown as an EngineError, and so is a failure mid-stream.
   * Engines without it generate (`generate`) and the chat feature builds the answer.
   */
  chatCompletions?(req: ChatCompletionsRequest): AsyncIterable<Record<string, unknown>>;
  /**
   * Anthropic Messages pass-through, for engines whose upstream speaks Anthropic's Messages API itself: the
   * client's body (its model name already mapped) is POSTed as it is to the upstream's `/v1/messages` (or, with
   * `count`, `/v1/messages/count_tokens`), and the answer comes back as it is: one JSON object (`stream` not true,
   * or `count`), or each event of the stream in order (`stream` true; each event's JSON, whose `type` is its
   * event name). A refusal before the first value is thrown as an EngineError, and so is a failure mid-stream
   * (an `error` event, a stream that ends before `message_stop`). Engines without it generate (`generate`) and the
   * feature builds Anthropic's answer.
   */
  messages?(req: MessagesForwardRequest): AsyncIterable<Record<string, unknown>>;
  /**
   * One call of the upstream's OpenAI API that Portico forwards as it is (an endpoint it does not model itself,
   * e.g. a feature that forwards /images/generations): the body (its model name already mapped) is POSTed to
   * `path` under the upstream's base URL, and its JSON answer comes back parsed. A refusal is thrown as an
   * EngineError. Engines without an upstream lack it.
   */
  forwardJson?(req: ForwardRequest): Promise<Record<string, unknown>>;
  /** an active health check of an upstream (docs/models.md): resolves when it is healthy, rejects with why not */
  probe?(kind: ProbeKind, model: string, signal: AbortSignal): Promise<void>;
  /** stops now: work in flight is cut (shutdown, after its grace) */
  close(): Promise<void>;
  /**
   * Stops taking new work and closes once the work in flight has finished (a model file reload changed or removed
   * this engine's deployment: requests that started on it finish on it). Without it the registry calls close(),
   * which such an engine must make harmless to work in flight.
   */
  retire?(): Promise<void>;
}

/**
 * What an active health check asks of a deployment: `models` a `GET /models` (cheap: no generation), `completion`
 * the smallest generation (one token; for embeddings, one short input), which also proves the model is loaded.
 */
export type ProbeKind = 'models' | 'completion';

/** A call forwarded to an upstream's OpenAI API as it is (TextEngine.forwardJson). */
export interface ForwardRequest {
  /** under the upstream's base URL, e.g. `/images/generations` */
  path: string;
  /** the JSON body: validated, the model name mapped to the upstream's */
  body: Record<string, unknown>;
  signal?: AbortSignal;
  route?: RouteNote;
}

/** A Chat Completions request forwarded to an upstream (TextEngine.chatCompletions). */
export interface ChatCompletionsRequest {
  /** the request body: validated, the model name mapped to the upstream's */
  body: Record<string, unknown>;
  signal?: AbortSignal;
  route?: RouteNote;
}

/** An Anthropic Messages request forwarded to an upstream (TextEngine.messages). */
export interface MessagesForwardRequest {
  /** the request body: the model name mapped to the upstream's, the rest as the client sent it */
  body: Record<string, unknown>;
  /** the `anthropic-beta` values the client sent: added to the deployment's own */
  betas?: readonly string[];
  /** POST /v1/messages/count_tokens instead of /v1/messages (one JSON answer) */
  count?: boolean;
  signal?: AbortSignal;
  route?: RouteNote;
}

/**
 * An engine failure with a message safe to show a client. `status` hints the HTTP status when it happens before
 * output; `upstreamStatus` is the HTTP status an upstream answered with, when it answered one (for the request log).
 */
export class EngineError extends Error {
  /**
   * The failure is the engine's or its upstream's, not the request's: trying again (elsewhere, or later) may
   * succeed. Set for connections refused, reset or timed out, 429 and 5xx answers; never for a refusal of the
   * request's content. The router (src/models/router) retries only these, and only before any output.
   */
  readonly retryable: boolean;
  /** ms the upstream asked to wait before trying again (its retry-after), when it said */
  readonly retryAfterMs?: number;
  /** the HTTP status an upstream answered with, when it answered one (for the request log) */
  readonly upstreamStatus?: number;
  constructor(
    message: string,
    readonly code: string = 'engine_error',
    readonly status: number = 502,
    opts: { retryable?: boolean; retryAfterMs?: number; upstreamStatus?: number } = {},
  ) {
    super(message);
    this.name = 'EngineError';
    this.retryable = opts.retryable ?? false;
    if (opts.upstreamStatus !== undefined) this.upstreamStatus = opts.upstreamStatus;
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
  }
}

// ---------------------------------------------------------------- text to speech

/** OpenAI's thirteen voices (the SDK's `voice` values). */
export type Voice = 'alloy' | 'ash' | 'ballad' | 'coral' | 'echo' | 'fable' | 'onyx' | 'nova' | 'sage' | 'shimmer' | 'verse' | 'marin' | 'cedar';

/**
 * How the embedded engines trade latency for quality: `standard` streams audio as soon as it exists (a long
 * first sentence is cut at its first clause, espeak-ng streams within a sentence, a fixed gain per voice);
 * `hd` renders each sentence whole and sets its level exactly (see src/engines/shared/loudness.ts).
 */
export type SpeechQuality = 'standard' | 'hd';

export interface SpeechRequest {
  text: string;
  /** engine-specific voice id, mapped from the OpenAI voice by the audio service */
  voice: string;
  /** 0.25 .. 4.0; above 1 is faster */
  speed: number;
  /** embedded engines: factor on the engine voice's own pitch (default 1) */
  pitch?: number;
  /** embedded engines: fixed gain in dB applied to the samples (standard quality; default 0) */
  gainDb?: number;
  /** embedded engines: default `standard`; other engines ignore it */
  quality?: SpeechQuality;
  /** turns on shared slots (the audio feature's fair scheduler), when the caller gives them: see WorkTurns */
  turns?: WorkTurns;
  signal?: AbortSignal;
}

/**
 * Turns on slots that several callers share (src/audio/scheduler.ts): work that honours them takes a turn for each
 * unit of work (a sentence: `cost` its characters) and ends it when that work is done, whatever its consumer does
 * meanwhile. `step` rejects at once when the signal aborts.
 */
export interface WorkTurns {
  step(cost: number, signal?: AbortSignal): Promise<{ done(completed: boolean): void }>;
}

/** Mono 16-bit signed PCM at `sampleRate` (defined with the codecs, which engines and features share). */
export type { PcmChunk } from '../codec/pcm.js';
import type { PcmChunk } from '../codec/pcm.js';

export interface SpeechEngine {
  readonly kind: string;
  /** voices this engine knows (engine-specific ids) */
  readonly voices: readonly string[];
  /** Synthesizes sentence by sentence; yields PCM as it is produced; stops when the signal aborts. */
  synthesize(req: SpeechRequest): AsyncIterable<PcmChunk>;
  close(): Promise<void>;
  /** as TextEngine.retire: closes once the work in flight has finished */
  retire?(): Promise<void>;
}

// ---------------------------------------------------------------- speech to text

export interface AudioUpload {
  bytes: Buffer;
  filename: string;
  mimeType?: string;
}

export interface TranscribeRequest {
  model: string;
  file: AudioUpload;
  /** 16 kHz mono float PCM decoded from `file` by the audio service (engines that forward the file ignore it) */
  pcm16k?: Float32Array;
  task: 'transcribe' | 'translate';
  language?: string;
  prompt?: string;
  temperature?: number;
  wordTimestamps: boolean;
  signal?: AbortSignal;
  /**
   * Called with each piece of text as the engine produces it, in order, when the engine can tell (whisper's new
   * segments); their concatenation is the transcript's text, give or take surrounding spaces. Optional on both
   * sides: an engine that cannot (pocketsphinx, which answers at the end) never calls it, and the streamed
   * transcription then sends each piece of audio's text when that piece is recognized (src/audio/stream.ts).
   */
  onText?: (delta: string) => void;
}

/** A segment; the optional fields are what the engine can tell (the formatter fills or computes the rest). */
export interface TranscriptSegment {
  start: number;
  end: number;
  text: string;
  /** token ids, for engines that decode tokens */
  tokens?: number[];
  avgLogprob?: number;
  noSpeechProb?: number;
  compressionRatio?: number;
  /** the temperature the segment was decoded at */
  temperature?: number;
}

export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
  /** the recognizer's posterior probability of the word (0..1), when it gives one (not sent to clients) */
  probability?: number;
}

export interface Transcript {
  text: string;
  /** ISO-639-1 code */
  language?: string;
  /** seconds */
  duration?: number;
  segments: TranscriptSegment[];
  words?: TranscriptWord[];
}

export interface TranscriptionEngine {
  readonly kind: string;
  /** whether this engine wants `pcm16k` (true) or forwards the original file (false) */
  readonly needsPcm: boolean;
  /** translation to English of non-English speech */
  readonly canTranslate: boolean;
  /** ISO-639-1 codes it recognizes, or undefined for any */
  readonly languages?: readonly string[];
  /** seconds of audio it decodes at one cost, however much of them is speech (whisper: its 30-s window) */
  readonly window?: number;
  /**
   * Jobs it can run at once (whisper: 1, its model's one context). The audio feature gives it no more turns at
   * once than this: the others wait in its fair scheduler, holding no slot. Unset: as many as it is given.
   */
  readonly concurrency?: number;
  transcribe(req: TranscribeRequest): Promise<Transcript>;
  close(): Promise<void>;
  /** as TextEngine.retire: closes once the work in flight has finished */
  retire?(): Promise<void>;
}

// ---------------------------------------------------------------- embeddings

export interface EmbedRequest {
  /** the model name the engine should use upstream */
  model: string;
  /** texts, or token arrays (ids of the model's own vocabulary), one vector each */
  input: Array<string | number[]>;
  /** fewer dimensions, where the model allows it (an engine refuses with a 400 EngineError where it does not) */
  dimensions?: number;
  /** a caller's end-user id, for upstreams that take it (OpenAI's `user`) */
  user?: string;
  signal?: AbortSignal;
  route?: RouteNote;
}

/**
 * Vectors packed in one Float64Array, vector i at [i * dims, (i + 1) * dims): a large answer decoded off the event
 * loop comes back so (moved from the worker thread, off the heap), not as millions of numbers in arrays.
 */
export interface PackedVectors {
  readonly flat: Float64Array;
  readonly count: number;
  readonly dims: number;
}

export interface EmbedResult {
  /** one vector per input, in order: arrays, or packed (a large answer: ../engines/shared/embeddings.ts) */
  vectors: number[][] | PackedVectors;
  inputTokens: number;
  model?: string;
}

export interface EmbeddingsEngine {
  readonly kind: string;
  /** the size of the model's vectors, when the engine knows it (embedded models, once loaded) */
  readonly dimensions?: number;
  embed(req: EmbedRequest): Promise<EmbedResult>;
  /** where an embedded engine runs (CPU, GPU) and how long it took to load, for the start log */
  info?(): { device: string; loadMs?: number };
  /** an active health check of an upstream (TextEngine.probe) */
  probe?(kind: ProbeKind, model: string, signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
  /** as TextEngine.retire: closes once the work in flight has finished */
  retire?(): Promise<void>;
}

// ---------------------------------------------------------------- realtime
/** One open session with an upstream realtime server: a WebSocket speaking OpenAI's Realtime events. */
export interface RealtimeLink {
  /** sends one client event (as JSON text); false when the link is already closed */
  send(event: Record<string, unknown>): boolean;
  /**
   * the upstream's server events, parsed, in order; ends when the upstream closes normally (1000/1001); throws an EngineError when the link fails (reset, a frame that is not a JSON object, an abnormal close, no event within the first-event timeout)
   *
   * One consumer. It also ends (without an error) once the link is closed on this side (close(), or the connect
   * request's signal aborted): what the upstream sent after that is dropped. Leaving the loop early closes the link.
   * A consumer that falls behind pauses the reading of the socket (the upstream then sees TCP backpressure).
   */
  readonly events: AsyncIterable<Record<string, unknown>>;
  /** bytes queued towards the upstream and not yet sent (for backpressure) */
  readonly bufferedAmount: number;
  /** closes the link (default 1000; a code WebSocket peers may not send becomes 1000); harmless when already closed */
  close(code?: number, reason?: string): void;
}
export interface RealtimeConnectRequest {
  /** the model name upstream (?model=) */
  model: string;
  /** aborting it before the link opens rejects connect (EngineError `aborted`, 499); after, it closes the link (1000) */
  signal?: AbortSignal;
}
/** The models a realtime pipeline of Portico's own engines is made of (absent: the built-in default of each). */
export interface RealtimeParts {
  transcription?: string;
  text?: string;
  speech?: string;
}
/**
 * A realtime model's engine: an upstream realtime server (`connect`), or a pipeline of the models Portico serves
 * (`parts`, no `connect`), which the realtime feature runs itself.
 */
export interface RealtimeEngine {
  readonly kind: string;
  readonly parts?: RealtimeParts;
  /**
   * opens a link: resolves once the WebSocket upgrade is done (the first server event, session.created, comes through
   * `events`); rejects with an EngineError when the upstream cannot be reached, refuses the upgrade, or does not
   * answer in time
   */
  connect?(req: RealtimeConnectRequest): Promise<RealtimeLink>;
  /** closes every open link (1001) and refuses new ones */
  close(): Promise<void>;
}

// ---------------------------------------------------------------- voice activity
/** Decides, frame by frame, whether 16 kHz mono audio is speech. */
export interface VoiceActivityDetector {
  /**
   * 'silero' or 'energy': which detector this is (said in the session and the logs); a Silero detector whose worker
   * thread stopped goes on as 'energy' (`fallbackReason` says why)
   */
  readonly name: string;
  readonly fallbackReason?: string;
  /** samples per frame (at 16 kHz); push() decides once per complete frame */
  readonly frameSamples: number;
  /**
   * feeds samples (16 kHz mono float in [-1, 1], any length, kept across calls); gives the decision of each frame
   * completed, in order (Silero decides in a worker thread: the answer comes by a promise; calls answer in order)
   */
  push(samples: Float32Array): Promise<boolean[]>;
  /** forgets the audio so far (a cleared buffer, a new turn) */
  reset(): void;
  close(): void;
}
export interface VoiceActivityOptions {
  /** OpenAI's server_vad threshold, 0..1 (default 0.5): higher needs louder/clearer speech */
  threshold: number;
}
