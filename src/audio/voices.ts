/**
 * OpenAI's thirteen voices on the embedded engines, and how one text is spoken by them. Which engine voice renders
 * each is the providers' to say (`builtin.voices` in src/engines/<provider>/provider.ts); this file puts their
 * declarations together and names none of them.
 *
 * Each voice is a distinct rendition: a different engine voice, or the same engine voice at a clearly different
 * pitch (test/engines/tts.test.ts proves every pair differs in pitch or spectrum). `gainDb` brings the voice
 * to the common level (-20 dBFS, src/engines/shared/loudness.ts); the figures were measured once with
 * `npm run voices:levels` (bench/voice-levels.ts) and must be measured again when a voice's parameters change.
 *
 * Text in other scripts than Latin (Chinese, Japanese kana, Korean, Cyrillic...) is spoken sentence by
 * sentence by the provider that declares `builtin.otherScripts`, in the voice of that language and the variant it
 * declares for the OpenAI voice
 * (src/engines/shared/scripts.ts); scripts no engine here can read are refused before any audio is made.
 */
import { EngineError, type PcmChunk, type SpeechQuality, type SpeechRequest, type Voice, type WorkTurns } from '../engines/types.js';
import { AsyncChannel } from '../platform/async-channel.js';
import { codePoints } from '../platform/code-points.js';
import type { EmbeddedSpeechEngine } from '../engines/shared/tts.js';
import { sentencesOf } from '../engines/shared/tts.js';
import { sentenceLanguage } from '../engines/shared/scripts.js';
import type { Provider } from '../engines/provider.js';
import { PROVIDERS } from '../engines/providers.js';

/** The provider of an embedded speech engine (one that declares the OpenAI voices it renders: Provider.builtin). */
export type EmbeddedTtsKind = string;

export interface VoiceTarget {
  /** which embedded engine speaks this voice: its provider */
  engine: EmbeddedTtsKind;
  /** the engine's own voice id */
  voice: string;
  /** factor on the engine voice's pitch (default 1) */
  pitch?: number;
  /** gain that brings this voice to the common level (standard quality; hd measures each sentence) */
  gainDb: number;
  /** the variant for sentences in other languages, on the provider that speaks them (`cmn` + `+f3`) */
  otherLanguages: string;
  /** short description, for docs and listings */
  description: string;
}

export const OPENAI_VOICES: readonly Voice[] = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'onyx', 'nova', 'sage', 'shimmer', 'verse', 'marin', 'cedar'];

/** The providers whose embedded engines render the OpenAI voices, in the order of the provider list. */
export const VOICE_PROVIDERS: readonly Provider[] = [...PROVIDERS.values()].filter((p) => p.builtin?.voices);

/** The provider that speaks sentences written in other scripts. */
const OTHER_SCRIPTS = [...PROVIDERS.values()].find((p) => p.builtin?.otherScripts);

/** The voice table, put together from the providers' declarations (each voice rendered by exactly one). */
const MAP: Record<Voice, VoiceTarget> = Object.fromEntries(
  OPENAI_VOICES.map((v) => {
    const by = VOICE_PROVIDERS.filter((p) => p.builtin!.voices!.renders[v]);
    const other = OTHER_SCRIPTS?.builtin?.otherScripts?.[v];
    if (by.length !== 1 || !other) throw new Error(`the voice ${v} must be rendered by one provider (${by.length}) and have a variant for other scripts`);
    return [v, { engine: by[0]!.name, ...by[0]!.builtin!.voices!.renders[v]!, otherLanguages: other }];
  }),
) as Record<Voice, VoiceTarget>;

export function isOpenAiVoice(x: unknown): x is Voice {
  return typeof x === 'string' && Object.prototype.hasOwnProperty.call(MAP, x);
}

/** The embedded engine and engine voice for an OpenAI voice. */
export function embeddedVoiceFor(voice: Voice): VoiceTarget {
  const t = MAP[voice];
  if (!t) throw new RangeError(`unknown voice ${String(voice)}`);
  return t;
}

/** The engine voices of the table, per provider (warmed up in each worker at start, where the engine takes them). */
export function tableVoices(): Record<string, readonly string[]> {
  const out: Record<string, string[]> = {};
  for (const t of Object.values(MAP)) if (!(out[t.engine] ??= []).includes(t.voice)) out[t.engine]!.push(t.voice);
  return out;
}

/** One stretch of consecutive sentences spoken by the same engine voice. */
export interface VoiceRun {
  engine: EmbeddedTtsKind;
  voice: string;
  pitch: number;
  gainDb: number;
  sentences: string[];
  /** the language when not the voice's own (for tests and logs) */
  language?: string;
}

/**
 * How `text` is spoken by `voice`: its sentences, grouped into runs of the same engine voice. Throws an
 * EngineError (400, `unsupported_language`) naming the first sentence no engine here can speak.
 */
export function planSpeech(text: string, voice: Voice, quality: SpeechQuality = 'standard'): VoiceRun[] {
  const target = embeddedVoiceFor(voice);
  const runs: VoiceRun[] = [];
  for (const sentence of sentencesOf(text, quality)) {
    const lang = sentenceLanguage(sentence);
    if (lang.kind === 'unsupported') {
      throw new EngineError(`${unspeakableMessage(lang.reason)} (in: ${JSON.stringify(sentence.slice(0, 60))})`, 'unsupported_language', 400);
    }
    const next: Omit<VoiceRun, 'sentences'> =
      lang.kind === 'voice'
        ? { engine: target.engine, voice: target.voice, pitch: target.pitch ?? 1, gainDb: target.gainDb }
        : { engine: OTHER_SCRIPTS!.name, voice: lang.espeak + target.otherLanguages, pitch: 1, gainDb: 0, language: lang.language };
    const last = runs[runs.length - 1];
    if (last && last.engine === next.engine && last.voice === next.voice && last.pitch === next.pitch) last.sentences.push(sentence);
    else runs.push({ ...next, sentences: [sentence] });
  }
  return runs;
}

export function unspeakableMessage(reason: string): string {
  return (
    `The input contains text the voices cannot speak: ${reason}. Besides English (and other text in Latin script, read ` +
    'as English), they speak Chinese, Japanese in kana, Korean, Russian, Ukrainian, Greek, Arabic, Persian, Urdu, Hindi, ' +
    'Bengali, Punjabi, Gujarati, Oriya, Tamil, Telugu, Kannada, Malayalam, Sinhala, Georgian, Armenian and Amharic.'
  );
}

/**
 * Speaks `req` (an OpenAI voice) on the embedded engines: each run of sentences on its engine voice, in order,
 * streamed as it is synthesized. `engine` gives the shared engine of a kind. `voiceModel`, when it gives an engine
 * (a neural voice model: Provider.builtin.voiceModel), speaks the runs in the voice's own language instead, with the
 * OpenAI voice name (it maps the names itself); runs in other scripts stay on their engine. With `req.turns`, each sentence
 * takes a turn of its own (./scheduler.ts, its characters the cost) and gives it back when the engine has
 * synthesized it, whether or not the consumer has read it yet: a slow reader never holds a slot.
 */
export async function* speakEmbedded(
  req: SpeechRequest,
  engine: (kind: EmbeddedTtsKind) => Promise<EmbeddedSpeechEngine>,
  voiceModel?: () => Promise<EmbeddedSpeechEngine | undefined>,
): AsyncGenerator<PcmChunk> {
  if (!isOpenAiVoice(req.voice)) {
    throw new EngineError(`Unknown voice '${req.voice}'. Supported voices: ${OPENAI_VOICES.join(', ')}`, 'invalid_voice', 400);
  }
  const runs = planSpeech(req.text, req.voice, req.quality);
  const neural = voiceModel ? await voiceModel() : undefined;
  const on = async (run: VoiceRun): Promise<[EmbeddedSpeechEngine, Pick<SpeechRequest, 'voice' | 'pitch' | 'gainDb'>]> =>
    neural && run.language === undefined
      ? [neural, { voice: req.voice, pitch: 1, gainDb: 0 }]
      : [await engine(run.engine), { voice: run.voice, pitch: run.pitch, gainDb: run.gainDb }];
  if (!req.turns) {
    for (const run of runs) {
      const [e, voice] = await on(run);
      yield* e.synthesizeSentences(run.sentences, { ...req, ...voice });
    }
    return;
  }
  yield* speakInTurns(runs, req, req.turns, on);
}

/** The sentences one after another, each in a turn; the audio runs ahead of the reader as it does without turns. */
async function* speakInTurns(
  runs: readonly VoiceRun[],
  req: SpeechRequest,
  turns: WorkTurns,
  on: (run: VoiceRun) => Promise<[EmbeddedSpeechEngine, Pick<SpeechRequest, 'voice' | 'pitch' | 'gainDb'>]>,
): AsyncGenerator<PcmChunk> {
  const stop = new AbortController();
  const signal = req.signal ? AbortSignal.any([req.signal, stop.signal]) : stop.signal;
  const channel = new AsyncChannel<PcmChunk>({ signal: req.signal });
  const producer = (async () => {
    try {
      for (const run of runs) {
        const [e, voice] = await on(run);
        const params: SpeechRequest = { ...req, turns: undefined, ...voice, signal };
        for (const sentence of run.sentences) {
          const turn = await turns.step(codePoints(sentence), signal);
          let completed = false;
          try {
            for await (const c of e.synthesizeSentences([sentence], params)) channel.push(c);
            completed = true;
          } finally {
            turn.done(completed);
          }
        }
      }
      channel.end();
    } catch (e) {
      channel.fail(e);
    }
  })();
  let finished = false;
  try {
    for await (const c of channel) yield c;
    finished = true;
  } finally {
    if (!finished) stop.abort();
    await producer;
  }
}
