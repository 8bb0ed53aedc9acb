import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { KEY_PATH, portal, v1, type CreatedKeyRecord, type CreateKeyRequest, type Me } from '../api.js';
import { useI18n } from '../i18n.js';
import { ErrorBox, Field, ModelSelect, Notice } from '../components/ui.js';
import { TalkPanel } from './Talk.js';
import { CODE_LANGUAGES, requestCode, type CodeLanguage, type ResponsesBody } from '../code.js';

export interface PlaygroundKey {
  id: string;
  name: string;
  key: string;
}

/**
 * Keys the playground may use, held in this tab's memory only: a key's full value is shown once, at creation, so the
 * page never writes it to localStorage or sessionStorage, where other scripts of the origin or a later visitor of
 * the browser profile could read it. A reload, or signing out, forgets them.
 */
let keys: PlaygroundKey[] = [];
/** the chosen key's id (the page's markup never holds a full key outside the field that shows it once) */
let chosen = '';
/**
 * The key the playground made for itself in this tab: reused while it is valid, so using the playground makes one
 * key per session rather than one per click. It expires when the session does, and may call only what the
 * playground calls (docs/portal.md, "Playground").
 */
let own: (PlaygroundKey & { expiresAt: number }) | undefined;
/**
 * the scopes the playground's own key needs: text (Responses), audio (speech, transcription) and realtime (the Talk
 * tab's client secrets); a scope the server does not offer (GET /me) is left out
 */
export const PLAYGROUND_SCOPES = ['responses', 'audio', 'realtime'];

export function rememberPlaygroundKey(k: PlaygroundKey) {
  keys = [k, ...keys.filter((x) => x.id !== k.id)];
  chosen = k.id;
}
export function forgetPlaygroundKeys() {
  keys = [];
  chosen = '';
  own = undefined;
}

type Tab = 'text' | 'speech' | 'transcription' | 'talk';
const SPEECH_FORMATS = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'];
const TRANSCRIPT_FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];

export function Playground({ me, sessionExpiresAt }: { me: Me | null; sessionExpiresAt: number }) {
  const { t } = useI18n();
  const [key, setKey] = useState(chosen);
  const [pasted, setPasted] = useState('');
  const [tab, setTab] = useState<Tab>('text');
  const [error, setError] = useState<unknown>(null);
  const [, setVersion] = useState(0);
  const tabs = useRef<HTMLDivElement>(null);
  const active = key === '__paste' ? pasted.trim() : (keys.find((k) => k.id === key)?.key ?? '');

  const createKey = async () => {
    setError(null);
    const now = Date.now() / 1000;
    // the key made earlier in this tab, while it has a minute left: no new key
    if (own && own.expiresAt > now + 60) {
      rememberPlaygroundKey(own);
      setKey(own.id);
      setVersion((v) => v + 1);
      return;
    }
    try {
      // the session's end, or an hour when that is closer than a minute away (the key outlives it by that at most)
      const expiresAt = Math.max(sessionExpiresAt, Math.ceil(now) + 3600);
      const offered = new Set(me?.api_keys.scopes ?? PLAYGROUND_SCOPES);
      const k = await portal<CreatedKeyRecord>('POST', KEY_PATH.api_keys, {
        name: t('play.keyName'),
        description: t('play.keyDescription', { date: new Date().toISOString().slice(0, 10) }),
        // never an empty list: that would be a key of every scope
        scopes: PLAYGROUND_SCOPES.some((s) => offered.has(s)) ? PLAYGROUND_SCOPES.filter((s) => offered.has(s)) : PLAYGROUND_SCOPES,
        expires_at: expiresAt,
      } satisfies CreateKeyRequest);
      own = { id: k.id, name: k.name, key: k.api_key, expiresAt: k.expires_at || expiresAt };
      rememberPlaygroundKey(own);
      setKey(k.id);
      setVersion((v) => v + 1);
    } catch (e) {
      setError(e);
    }
  };
  const models = (type: string) => (me?.models ?? []).filter((m) => m.type === type).map((m) => m.id);
  const order: Tab[] = ['text', 'speech', 'transcription', 'talk'];
  const onTabKey = (e: KeyboardEvent) => {
    const i = order.indexOf(tab);
    const n = order.length;
    const next = e.key === 'ArrowRight' ? order[(i + 1) % n] : e.key === 'ArrowLeft' ? order[(i + n - 1) % n] : undefined;
    if (!next) return;
    setTab(next);
    tabs.current?.querySelector<HTMLButtonElement>(`#play-tab-${next}`)?.focus();
  };

  return (
    <section>
      <h1 tabIndex={-1}>{t('play.title')}</h1>
      <p class="hint">{t('play.intro')}</p>
      <div class="card key-picker">
        <Field id="play-key" label={t('play.key')}>
          <select
            id="play-key"
            value={key}
            onChange={(e) => {
              chosen = e.currentTarget.value;
              setKey(chosen);
            }}
          >
            <option value="">{t('play.chooseKey')}</option>
            {keys.map((k) => (
              <option value={k.id}>
                {k.name} ({k.key.slice(0, 7)}…{k.key.slice(-4)})
              </option>
            ))}
            <option value="__paste">{t('play.pasteKey')}</option>
          </select>
        </Field>
        {key === '__paste' && (
          <Field id="play-pasted" label={t('play.pastedKey')}>
            <input id="play-pasted" type="password" autoComplete="off" spellcheck={false} value={pasted} onInput={(e) => setPasted(e.currentTarget.value)} />
          </Field>
        )}
        <button type="button" class="secondary" id="play-create-key" onClick={createKey}>
          {t('play.createKey')}
        </button>
        <p class="hint">{t('play.keyMemory')}</p>
        <ErrorBox error={error} />
      </div>
      <div class="tabs" role="tablist" aria-label={t('play.modes')} ref={tabs} onKeyDown={onTabKey}>
        {order.map((m) => (
          <button type="button" role="tab" id={`play-tab-${m}`} aria-selected={tab === m} aria-controls={`play-${m}`} tabIndex={tab === m ? 0 : -1} onClick={() => setTab(m)}>
            {t(`play.tab.${m}`)}
          </button>
        ))}
      </div>
      {!active && <Notice kind="info">{t('play.needKey')}</Notice>}
      <div role="tabpanel" id={`play-${tab}`} aria-labelledby={`play-tab-${tab}`} class="card">
        {tab === 'text' && <TextPanel apiKey={active} models={models('text')} />}
        {tab === 'speech' && <SpeechPanel apiKey={active} models={models('speech')} voicesOf={(m) => me?.models.find((x) => x.id === m)?.voices ?? []} />}
        {tab === 'transcription' && <TranscriptionPanel apiKey={active} models={models('transcription')} />}
        {tab === 'talk' && (
          <TalkPanel
            apiKey={active}
            models={models('realtime')}
            voicesOf={(m) => me?.models.find((x) => x.id === m)?.voices ?? []}
            transcriptionModel={transcriptionFor(models('transcription'))}
          />
        )}
      </div>
    </section>
  );
}

/**
 * The model that transcribes the Talk tab's microphone (the session's audio.input.transcription): OpenAI's name,
 * whisper-1, when this server lists it or lists no transcription model at all, else the first it lists.
 */
function transcriptionFor(models: string[]): string {
  return models.length === 0 || models.includes('whisper-1') ? 'whisper-1' : models[0];
}

/** Server-Sent Events of a fetch body, one parsed `data:` payload at a time. */
async function* sse(res: Response): AsyncGenerator<string> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) yield data;
    }
  }
}

interface Turn {
  role: 'user' | 'assistant';
  text: string;
  /** the answer was stopped before it was complete */
  stopped?: boolean;
}

/**
 * A conversation with a text model over the Responses API (POST /v1/responses, streamed), each request carrying the
 * conversation so far. A streamed answer is appended to the page as it comes, in O(1) per event: the text goes into
 * one text node (appendData), the raw events into their <pre> only while it is open, and the component renders at
 * most once a frame (the event count); the answer joins the conversation's state once, when it ends.
 */
function TextPanel({ apiKey, models }: { apiKey: string; models: string[] }) {
  const { t } = useI18n();
  const [model, setModel] = useState('');
  const [instructions, setInstructions] = useState('');
  const [temperature, setTemperature] = useState('');
  const [maxTokens, setMaxTokens] = useState('');
  const [input, setInput] = useState('');
  const [turns, setTurns] = useState<Turn[]>([]);
  const [streaming, setStreaming] = useState(false);
  const [eventCount, setEventCount] = useState(0);
  const [status, setStatus] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [codeLang, setCodeLang] = useState<CodeLanguage>('curl');
  const [copied, setCopied] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const live = useRef<HTMLDivElement>(null);
  const eventsBox = useRef<HTMLPreElement>(null);
  const eventsOpen = useRef(false);
  const events = useRef<string[]>([]);

  const body = (history: Turn[]): ResponsesBody => {
    const b: ResponsesBody = { model, input: history.map((m) => ({ role: m.role, content: m.text })), stream: true };
    if (instructions.trim()) b.instructions = instructions;
    if (temperature.trim() !== '' && Number.isFinite(Number(temperature))) b.temperature = Number(temperature);
    if (maxTokens.trim() !== '' && Number.isInteger(Number(maxTokens))) b.max_output_tokens = Number(maxTokens);
    return b;
  };

  const send = async (e?: Event) => {
    e?.preventDefault();
    if (streaming || !apiKey || !model || !input.trim()) return;
    const asked = input;
    const history: Turn[] = [...turns, { role: 'user', text: asked }];
    const req = body(history);
    const ac = new AbortController();
    abort.current = ac;
    setTurns(history);
    setInput('');
    setError(null);
    setStatus(t('play.sending'));
    setStreaming(true);
    events.current = [];
    setEventCount(0);
    if (eventsBox.current) eventsBox.current.textContent = '';
    let text = '';
    let node: Text | null = null;
    let frame = 0;
    let stopped = false;
    let failed = false;
    const tick = () => {
      frame = 0;
      setEventCount(events.current.length);
    };
    try {
      const res = await v1('/responses', apiKey, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(req), signal: ac.signal });
      for await (const data of sse(res)) {
        events.current.push(data);
        if (eventsOpen.current) eventsBox.current?.append(`${data}\n`);
        if (!frame) frame = requestAnimationFrame(tick);
        if (data === '[DONE]') break;
        const ev = JSON.parse(data);
        if (ev.type === 'response.output_text.delta') {
          text += ev.delta;
          if (node) node.appendData(ev.delta);
          else if (live.current) live.current.append((node = document.createTextNode(text)));
        } else if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
          setStatus(t('play.done', { tokens: ev.response?.usage?.output_tokens ?? 0 }));
        } else if (ev.type === 'response.failed' || ev.type === 'error') {
          const err = ev.response?.error ?? ev.error ?? ev;
          failed = true;
          setError({ code: err.code ?? 'engine_error', message: err.message ?? 'failed', status: 0 });
          setStatus('');
        }
      }
    } catch (err) {
      if ((err as Error).name === 'AbortError') stopped = true;
      else {
        failed = true;
        setError(err);
        setStatus('');
      }
    } finally {
      cancelAnimationFrame(frame);
      setEventCount(events.current.length);
      if (abort.current === ac) abort.current = null;
      setStreaming(false);
      if (text || stopped) setTurns([...history, { role: 'assistant', text, stopped }]);
      else if (failed) {
        // nothing came back: the message goes back into the box, to send again
        setTurns(turns);
        setInput(asked);
      }
      if (stopped) setStatus(t('play.stopped'));
    }
  };
  const onKey = (e: KeyboardEvent) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      void send();
    }
  };
  const code = requestCode(codeLang, location.origin, body([...turns, { role: 'user', text: input }]));
  const lastAnswer = turns.length && turns[turns.length - 1].role === 'assistant' ? turns.length - 1 : -1;

  return (
    <form onSubmit={send}>
      <ModelSelect id="text-model" models={models} value={model} onChange={setModel} />
      <Field id="text-instructions" label={t('play.instructions')}>
        <textarea id="text-instructions" rows={2} value={instructions} onInput={(e) => setInstructions(e.currentTarget.value)} />
      </Field>
      <div class="row">
        <Field id="text-temperature" label={t('play.temperature')} hint={t('play.defaultHint')}>
          <input
            id="text-temperature"
            type="number"
            min="0"
            max="2"
            step="0.1"
            inputMode="decimal"
            aria-describedby="text-temperature-hint"
            value={temperature}
            onInput={(e) => setTemperature(e.currentTarget.value)}
          />
        </Field>
        <Field id="text-max-tokens" label={t('play.maxTokens')} hint={t('play.defaultHint')}>
          <input
            id="text-max-tokens"
            type="number"
            min="1"
            step="1"
            inputMode="numeric"
            aria-describedby="text-max-tokens-hint"
            value={maxTokens}
            onInput={(e) => setMaxTokens(e.currentTarget.value)}
          />
        </Field>
      </div>
      {(turns.length > 0 || streaming) && (
        <ol class="conversation" aria-label={t('play.conversation')}>
          {turns.map((m, i) => (
            <li key={i} class={`msg ${m.role}`}>
              <span class="who">{m.role === 'user' ? t('play.you') : t('play.assistant')}</span>
              <div class="text" id={i === lastAnswer && !streaming ? 'text-answer' : undefined}>
                {m.text}
              </div>
              {m.stopped && <span class="hint">{t('play.stoppedNote')}</span>}
            </li>
          ))}
          {streaming && (
            <li key="live" class="msg assistant">
              <span class="who">{t('play.assistant')}</span>
              <div class="text" id="text-answer" ref={live} />
            </li>
          )}
        </ol>
      )}
      <Field id="text-input" label={t('play.message')} hint={t('play.ctrlEnter')}>
        <textarea
          id="text-input"
          rows={3}
          required={turns.length === 0}
          aria-describedby="text-input-hint"
          value={input}
          onInput={(e) => setInput(e.currentTarget.value)}
          onKeyDown={onKey}
        />
      </Field>
      <div class="buttons">
        <button type="submit" id="text-send" disabled={!apiKey || !model || streaming}>
          {t('play.send')}
        </button>
        <button type="button" class="secondary" id="text-stop" disabled={!streaming} onClick={() => abort.current?.abort()}>
          {t('play.stop')}
        </button>
        <button
          type="button"
          class="secondary"
          id="text-clear"
          disabled={streaming || turns.length === 0}
          onClick={() => {
            setTurns([]);
            setStatus('');
            setError(null);
          }}
        >
          {t('play.clear')}
        </button>
      </div>
      <ErrorBox error={error} />
      <p class="hint" role="status">
        {status}
      </p>
      <details
        onToggle={(e) => {
          eventsOpen.current = e.currentTarget.open;
          // filled once on opening, then appended to per event while open
          if (eventsOpen.current && eventsBox.current) eventsBox.current.textContent = events.current.map((x) => `${x}\n`).join('');
        }}
      >
        <summary>{t('play.rawEvents', { n: eventCount })}</summary>
        <pre class="events" id="text-events" ref={eventsBox} />
      </details>
      <details class="code-view" id="text-code">
        <summary>{t('play.code')}</summary>
        <p class="hint">{t('play.codeHint')}</p>
        <fieldset class="split">
          <legend>{t('play.codeLanguage')}</legend>
          {CODE_LANGUAGES.map((l) => (
            <label>
              <input type="radio" name="code-language" value={l} checked={codeLang === l} onChange={() => setCodeLang(l)} />
              {l === 'curl' ? 'curl' : l === 'python' ? 'Python' : 'JavaScript'}
            </label>
          ))}
        </fieldset>
        <pre class="result" id="text-code-body" tabIndex={0} aria-label={t('play.code')}>
          <code>{code}</code>
        </pre>
        <div class="buttons">
          <button
            type="button"
            class="secondary small"
            id="text-code-copy"
            aria-label={t('play.copyCode')}
            onClick={async () => {
              await navigator.clipboard.writeText(code);
              setCopied(true);
              setTimeout(() => setCopied(false), 2000);
            }}
          >
            {t('keys.copy')}
          </button>
          {copied && <span role="status">{t('keys.copied')}</span>}
        </div>
      </details>
    </form>
  );
}

/** Raw 24 kHz 16-bit mono PCM in a WAV container, so the page can play it. */
function pcmToWav(pcm: ArrayBuffer): Blob {
  const h = new DataView(new ArrayBuffer(44));
  const w = (o: number, s: string) => [...s].forEach((c, i) => h.setUint8(o + i, c.charCodeAt(0)));
  w(0, 'RIFF');
  h.setUint32(4, 36 + pcm.byteLength, true);
  w(8, 'WAVEfmt ');
  h.setUint32(16, 16, true);
  h.setUint16(20, 1, true);
  h.setUint16(22, 1, true);
  h.setUint32(24, 24000, true);
  h.setUint32(28, 48000, true);
  h.setUint16(32, 2, true);
  h.setUint16(34, 16, true);
  w(36, 'data');
  h.setUint32(40, pcm.byteLength, true);
  return new Blob([h.buffer, pcm], { type: 'audio/wav' });
}

function SpeechPanel({ apiKey, models, voicesOf }: { apiKey: string; models: string[]; voicesOf: (model: string) => string[] }) {
  const { t } = useI18n();
  const [model, setModel] = useState('');
  const [text, setText] = useState('');
  const [voice, setVoice] = useState('alloy');
  // every voice the server says the model speaks (GET /me)
  const voices = voicesOf(model);
  useLayoutEffect(() => {
    if (voices.length && !voices.includes(voice)) setVoice(voices[0]);
  }, [voices.join(',')]);
  const [format, setFormat] = useState('mp3');
  const [speed, setSpeed] = useState('1');
  const [audio, setAudio] = useState<{ url: string; name: string; bytes: number } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => () => audio && URL.revokeObjectURL(audio.url), [audio]);

  const speak = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const res = await v1('/audio/speech', apiKey, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, input: text, voice, response_format: format, speed: Number(speed) }),
      });
      const buf = await res.arrayBuffer();
      const blob = format === 'pcm' ? pcmToWav(buf) : new Blob([buf], { type: res.headers.get('content-type') ?? 'audio/mpeg' });
      setAudio({ url: URL.createObjectURL(blob), name: `speech.${format === 'pcm' ? 'wav' : format}`, bytes: buf.byteLength });
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form onSubmit={speak}>
      <ModelSelect id="speech-model" models={models} value={model} onChange={setModel} />
      <Field id="speech-text" label={t('play.speechText')}>
        <textarea id="speech-text" rows={3} required maxLength={4096} value={text} onInput={(e) => setText(e.currentTarget.value)} />
      </Field>
      <div class="row">
        <Field id="speech-voice" label={t('play.voice')}>
          <select id="speech-voice" value={voice} onChange={(e) => setVoice(e.currentTarget.value)}>
            {voices.map((v) => (
              <option value={v}>{v}</option>
            ))}
          </select>
        </Field>
        <Field id="speech-format" label={t('play.format')}>
          <select id="speech-format" value={format} onChange={(e) => setFormat(e.currentTarget.value)}>
            {SPEECH_FORMATS.map((v) => (
              <option value={v}>{v}</option>
            ))}
          </select>
        </Field>
        <Field id="speech-speed" label={t('play.speed')}>
          <input id="speech-speed" type="number" min="0.25" max="4" step="0.05" value={speed} onInput={(e) => setSpeed(e.currentTarget.value)} />
        </Field>
      </div>
      <div class="buttons">
        <button type="submit" id="speech-go" disabled={!apiKey || !model || busy}>
          {busy ? t('play.working') : t('play.speak')}
        </button>
      </div>
      <ErrorBox error={error} />
      {audio && (
        <div class="audio-out">
          <audio controls src={audio.url} id="speech-audio" aria-label={t('play.speechResult')} />
          <a href={audio.url} download={audio.name}>
            {t('play.download', { name: audio.name, kb: Math.ceil(audio.bytes / 1024) })}
          </a>
        </div>
      )}
    </form>
  );
}

function TranscriptionPanel({ apiKey, models }: { apiKey: string; models: string[] }) {
  const { t } = useI18n();
  const [model, setModel] = useState('');
  const [file, setFile] = useState<File | null>(null);
  const [format, setFormat] = useState('json');
  const [language, setLanguage] = useState('');
  const [result, setResult] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [recording, setRecording] = useState<MediaRecorder | null>(null);

  const record = async () => {
    setError(null);
    if (recording) {
      recording.stop();
      return;
    }
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const rec = new MediaRecorder(stream);
      const chunks: Blob[] = [];
      rec.ondataavailable = (e) => chunks.push(e.data);
      rec.onstop = () => {
        stream.getTracks().forEach((tr) => tr.stop());
        const type = rec.mimeType || 'audio/webm';
        setFile(new File(chunks, `recording.${type.includes('ogg') ? 'ogg' : 'webm'}`, { type }));
        setRecording(null);
      };
      rec.start();
      setRecording(rec);
    } catch (e) {
      setError({ code: 'microphone', message: (e as Error).message, status: 0 });
    }
  };
  const transcribe = async (e: Event) => {
    e.preventDefault();
    if (!file) return;
    setBusy(true);
    setError(null);
    setResult('');
    try {
      const form = new FormData();
      form.append('file', file);
      form.append('model', model);
      form.append('response_format', format);
      if (language.trim()) form.append('language', language.trim());
      const res = await v1('/audio/transcriptions', apiKey, { method: 'POST', body: form });
      const body = await res.text();
      setResult(format === 'json' || format === 'verbose_json' ? JSON.stringify(JSON.parse(body), null, 2) : body);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form onSubmit={transcribe}>
      <ModelSelect id="stt-model" models={models} value={model} onChange={setModel} />
      <div class="row">
        <Field id="stt-file" label={t('play.audioFile')}>
          <input id="stt-file" type="file" accept="audio/*,.flac,.mp3,.mp4,.mpeg,.mpga,.m4a,.ogg,.oga,.wav,.webm" onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} />
        </Field>
        <div class="field">
          <span class="label-like">{t('play.orRecord')}</span>
          <button type="button" class="secondary" id="stt-record" aria-pressed={recording !== null} onClick={record}>
            {recording ? t('play.stopRecording') : t('play.record')}
          </button>
        </div>
      </div>
      {file && <p class="hint">{t('play.fileChosen', { name: file.name, kb: Math.ceil(file.size / 1024) })}</p>}
      <div class="row">
        <Field id="stt-format" label={t('play.responseFormat')}>
          <select id="stt-format" value={format} onChange={(e) => setFormat(e.currentTarget.value)}>
            {TRANSCRIPT_FORMATS.map((v) => (
              <option value={v}>{v}</option>
            ))}
          </select>
        </Field>
        <Field id="stt-language" label={t('play.language')}>
          <input id="stt-language" maxLength={8} placeholder="en" value={language} onInput={(e) => setLanguage(e.currentTarget.value)} />
        </Field>
      </div>
      <div class="buttons">
        <button type="submit" id="stt-go" disabled={!apiKey || !model || !file || busy}>
          {busy ? t('play.working') : t('play.transcribe')}
        </button>
      </div>
      <ErrorBox error={error} />
      {result && (
        <>
          <h2 class="small-head">{t('play.result')}</h2>
          <pre class="result" id="stt-result">
            {result}
          </pre>
        </>
      )}
    </form>
  );
}
