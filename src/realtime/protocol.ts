/**
 * The shapes of OpenAI's Realtime API (GA) as Portico reads and writes them: the session's configuration (what
 * session.update and client secrets may set, checked field by field), conversation items, and the error event.
 * The official `openai` SDK's types (resources/realtime/realtime.d.ts) are the reference.
 */
import { randomBytes } from 'node:crypto';
import { AUDIO_FORMAT_TYPES, formatOf, type AudioFormat, type AudioFormatType } from './audio.js';
import { ERRORS, type AppError } from '../platform/errors.js';

export type Obj = Record<string, unknown>;

/** ids as OpenAI writes them: a prefix and 22 characters */
export function newId(prefix: string): string {
  return prefix + randomBytes(16).toString('base64url').slice(0, 22);
}

export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A client's mistake, said in an `error` event (the session stays open). */
export class ClientEventError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly param: string | null = null,
    readonly type = 'invalid_request_error',
  ) {
    super(message);
  }
}
const bad = (message: string, param: string | null = null, code = 'invalid_value') => new ClientEventError(code, message, param);

export interface ServerVad {
  type: 'server_vad' | 'semantic_vad';
  threshold: number;
  prefix_padding_ms: number;
  silence_duration_ms: number;
  idle_timeout_ms: number | null;
  create_response: boolean;
  interrupt_response: boolean;
  /** semantic_vad only: how soon a turn is taken as ended (mapped to a silence duration) */
  eagerness?: 'low' | 'medium' | 'high' | 'auto';
}

export interface FunctionToolDef {
  type: 'function';
  name: string;
  description?: string;
  parameters?: Obj;
}

export type ToolChoiceValue = 'auto' | 'none' | 'required' | { type: 'function'; name: string };

export interface Transcription {
  model: string;
  language?: string;
  prompt?: string;
}

/** A session's configuration, in its wire names. */
export interface SessionConfig {
  type: 'realtime' | 'transcription';
  model: string;
  instructions: string;
  output_modalities: Array<'audio' | 'text'>;
  input_format: AudioFormatType;
  output_format: AudioFormatType;
  transcription: Transcription | null;
  noise_reduction: { type: 'near_field' | 'far_field' } | null;
  turn_detection: ServerVad | null;
  voice: string;
  speed: number;
  tools: FunctionToolDef[];
  tool_choice: ToolChoiceValue;
  temperature: number | null;
  max_output_tokens: number | 'inf';
  tracing: unknown;
  include: string[] | null;
}

export const DEFAULT_INSTRUCTIONS =
  'You are a helpful, friendly voice assistant. Your answers are spoken aloud: keep them short and conversational, without lists, markup or emoji.';

export const SEMANTIC_SILENCE: Record<string, number> = { low: 1200, medium: 700, high: 400, auto: 700 };

export function defaultVad(type: 'server_vad' | 'semantic_vad' = 'server_vad'): ServerVad {
  return { type, threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, idle_timeout_ms: null, create_response: true, interrupt_response: true };
}

export function defaultConfig(model: string, type: 'realtime' | 'transcription', transcriptionModel: string): SessionConfig {
  return {
    type,
    model,
    instructions: type === 'realtime' ? DEFAULT_INSTRUCTIONS : '',
    output_modalities: ['audio'],
    input_format: 'audio/pcm',
    output_format: 'audio/pcm',
    // a transcription session transcribes; a conversation's user audio is transcribed for the text model anyway,
    // and the events say so only when the client asks (OpenAI's default: off)
    transcription: type === 'transcription' ? { model: transcriptionModel } : null,
    noise_reduction: null,
    turn_detection: defaultVad(),
    voice: 'alloy',
    speed: 1,
    tools: [],
    tool_choice: 'auto',
    temperature: null,
    max_output_tokens: 'inf',
    tracing: null,
    include: null,
  };
}

export const MAX_INSTRUCTIONS = 256 * 1024;
export const MAX_TOOLS = 128;
export const MIN_SPEED = 0.25;
export const MAX_SPEED = 1.5;

function str(v: unknown, param: string, max = 10_000): string {
  if (typeof v !== 'string') throw bad(`Invalid type for '${param}': expected a string, but got ${kind(v)}.`, param, 'invalid_type');
  if (v.length > max) throw bad(`'${param}' is too long: ${v.length} characters; the maximum is ${max}.`, param, 'string_above_max_length');
  return v;
}

const kind = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`);

function num(v: unknown, param: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw bad(`Invalid type for '${param}': expected a number, but got ${kind(v)}.`, param, 'invalid_type');
  if (v < min || v > max) throw bad(`Invalid '${param}': ${v}; it must be between ${min} and ${max}.`, param);
  return v;
}

function int(v: unknown, param: string, min: number, max: number): number {
  const n = num(v, param, min, max);
  if (!Number.isInteger(n)) throw bad(`Invalid '${param}': expected an integer, but got ${n}.`, param, 'invalid_type');
  return n;
}

function bool(v: unknown, param: string): boolean {
  if (typeof v !== 'boolean') throw bad(`Invalid type for '${param}': expected a boolean, but got ${kind(v)}.`, param, 'invalid_type');
  return v;
}

function obj(v: unknown, param: string): Obj {
  if (!isObj(v)) throw bad(`Invalid type for '${param}': expected an object, but got ${kind(v)}.`, param, 'invalid_type');
  return v;
}

function only(o: Obj, param: string, known: readonly string[]) {
  for (const k of Object.keys(o)) if (!known.includes(k)) throw bad(`Unknown parameter: '${param}.${k}'.`, `${param}.${k}`, 'unknown_parameter');
}

function format(v: unknown, param: string): AudioFormatType {
  const o = obj(v, param);
  only(o, param, ['type', 'rate']);
  if (!AUDIO_FORMAT_TYPES.includes(o.type as AudioFormatType)) {
    throw bad(`Invalid value: ${JSON.stringify(o.type)}. Supported values are: ${AUDIO_FORMAT_TYPES.map((t) => `'${t}'`).join(', ')}.`, `${param}.type`);
  }
  if (o.type === 'audio/pcm' && o.rate !== undefined && o.rate !== 24000)
    throw bad(`Invalid '${param}.rate': ${JSON.stringify(o.rate)}; only 24000 is supported.`, `${param}.rate`);
  if (o.type !== 'audio/pcm' && o.rate !== undefined && o.rate !== 8000) throw bad(`Invalid '${param}.rate': ${JSON.stringify(o.rate)}; G.711 is 8000.`, `${param}.rate`);
  return o.type as AudioFormatType;
}

export function parseTools(v: unknown, param: string): FunctionToolDef[] {
  if (!Array.isArray(v)) throw bad(`Invalid type for '${param}': expected an array, but got ${kind(v)}.`, param, 'invalid_type');
  if (v.length > MAX_TOOLS) throw bad(`'${param}' has ${v.length} tools; the maximum is ${MAX_TOOLS}.`, param, 'array_above_max_length');
  const names = new Set<string>();
  return v.map((t, i) => {
    const p = `${param}[${i}]`;
    const o = obj(t, p);
    if (o.type !== 'function') throw bad(`Invalid value: ${JSON.stringify(o.type)}. Supported values are: 'function' (MCP tools are not supported here).`, `${p}.type`);
    only(o, p, ['type', 'name', 'description', 'parameters']);
    const name = str(o.name, `${p}.name`, 64);
    if (!/^[a-zA-Z0-9_-]{1,64}$/.test(name)) throw bad(`Invalid '${p}.name': ${JSON.stringify(name)}; use letters, digits, _ and -.`, `${p}.name`);
    if (names.has(name)) throw bad(`Duplicate tool name '${name}'.`, `${p}.name`);
    names.add(name);
    const out: FunctionToolDef = { type: 'function', name };
    if (o.description !== undefined) out.description = str(o.description, `${p}.description`, 100_000);
    if (o.parameters !== undefined) out.parameters = obj(o.parameters, `${p}.parameters`);
    return out;
  });
}

export function parseToolChoice(v: unknown, param: string, tools: readonly FunctionToolDef[]): ToolChoiceValue {
  if (v === 'auto' || v === 'none' || v === 'required') return v;
  if (isObj(v) && v.type === 'function' && typeof v.name === 'string') {
    if (!tools.some((t) => t.name === v.name)) throw bad(`Tool choice '${v.name}' is not one of the tools.`, `${param}.name`);
    return { type: 'function', name: v.name };
  }
  throw bad(`Invalid value for '${param}': use 'auto', 'none', 'required' or {"type": "function", "name": ...}.`, param);
}

export function parseModalities(v: unknown, param: string): Array<'audio' | 'text'> {
  if (!Array.isArray(v) || v.length !== 1 || (v[0] !== 'audio' && v[0] !== 'text')) {
    throw bad(`Invalid '${param}': ${JSON.stringify(v)}; use ["audio"] (speech with its transcript) or ["text"].`, param);
  }
  return [v[0]];
}

export function parseMaxTokens(v: unknown, param: string): number | 'inf' {
  if (v === 'inf') return v;
  return int(v, param, 1, 4096);
}

function parseVad(v: unknown, param: string): ServerVad | null {
  if (v === null) return null;
  const o = obj(v, param);
  if (o.type !== 'server_vad' && o.type !== 'semantic_vad')
    throw bad(`Invalid value: ${JSON.stringify(o.type)}. Supported values are: 'server_vad', 'semantic_vad'.`, `${param}.type`);
  only(o, param, ['type', 'threshold', 'prefix_padding_ms', 'silence_duration_ms', 'idle_timeout_ms', 'create_response', 'interrupt_response', 'eagerness']);
  const vad = defaultVad(o.type);
  if (o.threshold !== undefined) vad.threshold = num(o.threshold, `${param}.threshold`, 0, 1);
  if (o.prefix_padding_ms !== undefined) vad.prefix_padding_ms = int(o.prefix_padding_ms, `${param}.prefix_padding_ms`, 0, 5000);
  if (o.silence_duration_ms !== undefined) vad.silence_duration_ms = int(o.silence_duration_ms, `${param}.silence_duration_ms`, 0, 10_000);
  if (o.idle_timeout_ms !== undefined && o.idle_timeout_ms !== null) vad.idle_timeout_ms = int(o.idle_timeout_ms, `${param}.idle_timeout_ms`, 5000, 30_000);
  if (o.create_response !== undefined) vad.create_response = bool(o.create_response, `${param}.create_response`);
  if (o.interrupt_response !== undefined) vad.interrupt_response = bool(o.interrupt_response, `${param}.interrupt_response`);
  if (o.eagerness !== undefined) {
    if (o.type !== 'semantic_vad' || !['low', 'medium', 'high', 'auto'].includes(o.eagerness as string)) throw bad(`Invalid '${param}.eagerness'.`, `${param}.eagerness`);
    vad.eagerness = o.eagerness as ServerVad['eagerness'];
    vad.silence_duration_ms = SEMANTIC_SILENCE[vad.eagerness!]!;
  } else if (o.type === 'semantic_vad' && o.silence_duration_ms === undefined) vad.silence_duration_ms = SEMANTIC_SILENCE.auto!;
  return vad;
}

function parseTranscription(v: unknown, param: string): Transcription | null {
  if (v === null) return null;
  const o = obj(v, param);
  only(o, param, ['model', 'language', 'prompt']);
  const t: Transcription = { model: str(o.model, `${param}.model`, 200) };
  if (o.language !== undefined && o.language !== null) {
    t.language = str(o.language, `${param}.language`, 16);
    if (!/^[a-z]{2,3}(-[A-Za-z0-9]+)?$/.test(t.language))
      throw bad(`Invalid '${param}.language': ${JSON.stringify(t.language)}; use an ISO-639-1 code such as 'en'.`, `${param}.language`);
  }
  if (o.prompt !== undefined && o.prompt !== null) t.prompt = str(o.prompt, `${param}.prompt`, 4096);
  return t;
}

/** What a session.update (or a client secret's session) changes; checked against `voices` and the known models by `check`. */
export function applySessionUpdate(cur: SessionConfig, v: unknown, o: { voices: readonly string[]; voiceLocked: boolean; check: (c: SessionConfig) => void }): SessionConfig {
  const s = obj(v, 'session');
  const next: SessionConfig = structuredClone(cur);
  const known = [
    'type',
    'model',
    'instructions',
    'output_modalities',
    'audio',
    'tools',
    'tool_choice',
    'temperature',
    'max_output_tokens',
    'tracing',
    'include',
    'prompt',
    'truncation',
    'object',
    'id',
    'expires_at',
    'reasoning',
  ];
  only(s, 'session', known);
  if (s.type !== undefined) {
    if (s.type !== 'realtime' && s.type !== 'transcription')
      throw bad(`Invalid value: ${JSON.stringify(s.type)}. Supported values are: 'realtime', 'transcription'.`, 'session.type');
    if (s.type !== cur.type) throw bad(`A ${cur.type} session cannot become a ${s.type} session; open a new one.`, 'session.type');
  }
  if (s.model !== undefined && s.model !== cur.model) throw bad(`The session's model is '${cur.model}'; it cannot change (open a new session with ?model=).`, 'session.model');
  if (s.instructions !== undefined) next.instructions = str(s.instructions, 'session.instructions', MAX_INSTRUCTIONS);
  if (s.output_modalities !== undefined) next.output_modalities = parseModalities(s.output_modalities, 'session.output_modalities');
  if (s.tools !== undefined) next.tools = parseTools(s.tools, 'session.tools');
  if (s.tool_choice !== undefined) next.tool_choice = parseToolChoice(s.tool_choice, 'session.tool_choice', next.tools);
  if (s.temperature !== undefined) next.temperature = s.temperature === null ? null : num(s.temperature, 'session.temperature', 0, 2);
  if (s.max_output_tokens !== undefined) next.max_output_tokens = parseMaxTokens(s.max_output_tokens, 'session.max_output_tokens');
  if (s.tracing !== undefined) next.tracing = s.tracing;
  if (s.include !== undefined) {
    if (s.include !== null && (!Array.isArray(s.include) || s.include.some((x) => x !== 'item.input_audio_transcription.logprobs'))) {
      throw bad("Invalid 'session.include': the supported value is ['item.input_audio_transcription.logprobs'].", 'session.include');
    }
    next.include = s.include as string[] | null;
  }
  if (s.prompt !== undefined && s.prompt !== null) throw bad('Stored prompts are not supported here; send instructions.', 'session.prompt', 'unsupported_parameter');
  if (s.audio !== undefined) {
    const a = obj(s.audio, 'session.audio');
    only(a, 'session.audio', ['input', 'output']);
    if (a.input !== undefined) {
      const i = obj(a.input, 'session.audio.input');
      only(i, 'session.audio.input', ['format', 'transcription', 'noise_reduction', 'turn_detection']);
      if (i.format !== undefined) next.input_format = format(i.format, 'session.audio.input.format');
      if (i.transcription !== undefined) next.transcription = parseTranscription(i.transcription, 'session.audio.input.transcription');
      if (i.turn_detection !== undefined) next.turn_detection = parseVad(i.turn_detection, 'session.audio.input.turn_detection');
      if (i.noise_reduction !== undefined) {
        if (i.noise_reduction === null) next.noise_reduction = null;
        else {
          const n = obj(i.noise_reduction, 'session.audio.input.noise_reduction');
          if (n.type !== 'near_field' && n.type !== 'far_field')
            throw bad("Invalid 'session.audio.input.noise_reduction.type': use 'near_field' or 'far_field'.", 'session.audio.input.noise_reduction.type');
          next.noise_reduction = { type: n.type };
        }
      }
    }
    if (a.output !== undefined) {
      const out = obj(a.output, 'session.audio.output');
      only(out, 'session.audio.output', ['format', 'voice', 'speed']);
      if (out.format !== undefined) next.output_format = format(out.format, 'session.audio.output.format');
      if (out.speed !== undefined) next.speed = num(out.speed, 'session.audio.output.speed', MIN_SPEED, MAX_SPEED);
      if (out.voice !== undefined) {
        const voice = isObj(out.voice) ? out.voice.id : out.voice;
        if (typeof voice !== 'string' || !o.voices.includes(voice)) {
          throw bad(`Invalid voice ${JSON.stringify(voice)}. Supported voices: ${o.voices.join(', ')}.`, 'session.audio.output.voice');
        }
        if (voice !== cur.voice && o.voiceLocked)
          throw new ClientEventError('cannot_update_voice', "Cannot update a conversation's voice if assistant audio is present.", 'session.audio.output.voice');
        next.voice = voice;
      }
    }
  }
  o.check(next);
  return next;
}

/** The session object of session.created / session.updated (and of a client secret), in OpenAI's GA shape. */
export function sessionObject(id: string, c: SessionConfig, expiresAt: number): Obj {
  const input: Obj = {
    format: formatOf(c.input_format),
    transcription: c.transcription,
    noise_reduction: c.noise_reduction,
    turn_detection: c.turn_detection,
  };
  if (c.type === 'transcription') {
    return { type: 'transcription', object: 'realtime.transcription_session', id, expires_at: expiresAt, audio: { input }, include: c.include };
  }
  return {
    type: 'realtime',
    object: 'realtime.session',
    id,
    model: c.model,
    output_modalities: c.output_modalities,
    instructions: c.instructions,
    tools: c.tools,
    tool_choice: c.tool_choice,
    max_output_tokens: c.max_output_tokens,
    tracing: c.tracing,
    prompt: null,
    truncation: 'auto',
    expires_at: expiresAt,
    include: c.include,
    audio: { input, output: { format: formatOf(c.output_format) as AudioFormat, voice: c.voice, speed: c.speed } },
    ...(c.temperature !== null ? { temperature: c.temperature } : {}),
  };
}

/** the type OpenAI's error shape gives an error of the one table */
export const errType = (a: AppError): string => ERRORS[a.code].type;
