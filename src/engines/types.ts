/**
 * The small interfaces every engine implements. Engines never know HTTP: they take plain requests
 * and an AbortSignal, and give back data or async iterables of events. Services (src/responses,
 * src/audio) turn these into wire formats.
 */

// ---------------------------------------------------------------- text generation

export type ChatRole = 'system' | 'developer' | 'user' | 'assistant' | 'tool';

export type ChatContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; url: string; detail?: 'auto' | 'low' | 'high' };

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
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; name: string; schema: Record<string, unknown>; strict?: boolean; description?: string };

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
  reasoningEffort?: string;
  /** stable id of the conversation prefix (e.g. previous response id) so engines can reuse a KV cache */
  cacheKey?: string;
  /** id under which this generation's state may be kept for a later request that continues it */
  saveKey?: string;
  signal?: AbortSignal;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedTokens?: number;
  reasoningTokens?: number;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls';

/** Events in order. Tool calls: start, zero or more deltas, end, each call finished before the next starts. */
export type GenerateEvent =
  | { type: 'reasoning_delta'; delta: string }
  | { type: 'text_delta'; delta: string }
  | { type: 'tool_call_start'; callId: string; name: string }
  | { type: 'tool_call_delta'; callId: string; delta: string }
  | { type: 'tool_call_end'; callId: string; arguments: string }
  | { type: 'done'; finishReason: FinishReason; usage: Usage; model?: string };

export interface TextEngine {
  readonly kind: string;
  /** context window in tokens, when known */
  readonly contextWindow?: number;
  generate(req: GenerateRequest): AsyncIterable<GenerateEvent>;
  /** exact (or best-effort for upstreams) token count of a conversation as the model would see it */
  countTokens(req: Pick<GenerateRequest, 'model' | 'messages' | 'tools'>): Promise<number>;
  close(): Promise<void>;
}

/** An engine failure with a message safe to show a client. `status` hints the HTTP status when it happens before output. */
export class EngineError extends Error {
  constructor(
    message: string,
    readonly code: string = 'engine_error',
    readonly status: number = 502,
  ) {
    super(message);
    this.name = 'EngineError';
  }
}

// ---------------------------------------------------------------- text to speech

export type Voice = 'alloy' | 'echo' | 'fable' | 'onyx' | 'nova' | 'shimmer';

export interface SpeechRequest {
  text: string;
  /** engine-specific voice id, mapped from the OpenAI voice by the audio service */
  voice: string;
  /** 0.25 .. 4.0; above 1 is faster */
  speed: number;
  signal?: AbortSignal;
}

/** Mono 16-bit signed PCM at `sampleRate`. */
export interface PcmChunk {
  samples: Int16Array;
  sampleRate: number;
}

export interface SpeechEngine {
  readonly kind: string;
  /** voices this engine knows (engine-specific ids) */
  readonly voices: readonly string[];
  /** Synthesizes sentence by sentence; yields PCM as it is produced; stops when the signal aborts. */
  synthesize(req: SpeechRequest): AsyncIterable<PcmChunk>;
  close(): Promise<void>;
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
}

export interface TranscriptSegment {
  start: number;
  end: number;
  text: string;
  tokens?: number[];
  avgLogprob?: number;
  noSpeechProb?: number;
  compressionRatio?: number;
  temperature?: number;
}

export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
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
  transcribe(req: TranscribeRequest): Promise<Transcript>;
  close(): Promise<void>;
}
