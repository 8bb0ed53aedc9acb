import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { ApiError } from '../api.js';
import { useI18n, type Key } from '../i18n.js';
import { ErrorBox, Field, ModelSelect } from '../components/ui.js';
import { TalkSession, type TalkLine, type TalkState } from '../talk/session.js';

/** the voices of OpenAI's realtime models, when the server names none for the model */
export const REALTIME_VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'sage', 'shimmer', 'verse', 'marin', 'cedar'];

/**
 * A spoken conversation with a realtime model (OpenAI's Realtime API): the microphone to the model, its answer
 * played as it arrives, the transcript of both sides beside it (web/src/talk/session.ts does the talking). Leaving
 * the tab ends the conversation.
 */
export function TalkPanel(props: { apiKey: string; models: string[]; voicesOf: (model: string) => string[]; transcriptionModel: string }) {
  const { t } = useI18n();
  const [model, setModel] = useState('');
  const [voice, setVoice] = useState('alloy');
  const [instructions, setInstructions] = useState('');
  const [state, setState] = useState<TalkState | 'idle' | 'stopped'>('idle');
  const [lines, setLines] = useState<TalkLine[]>([]);
  const [error, setError] = useState<ApiError | null>(null);
  const session = useRef<TalkSession | null>(null);
  const named = props.voicesOf(model);
  const voices = named.length ? named : REALTIME_VOICES;
  useLayoutEffect(() => {
    if (!voices.includes(voice)) setVoice(voices[0]);
  }, [voices.join(',')]);
  // leaving the tab (or the page) ends the conversation: the microphone is released
  useEffect(() => () => session.current?.stop(), []);

  const talking = state !== 'idle' && state !== 'stopped';
  const toggle = () => {
    if (session.current) {
      session.current.stop();
      return;
    }
    setError(null);
    setLines([]);
    const s: TalkSession = new TalkSession(
      { apiKey: props.apiKey, model, voice, instructions, transcriptionModel: props.transcriptionModel },
      {
        state: (st) => session.current === s && setState(st),
        lines: (l) => session.current === s && setLines(l),
        error: (e) => session.current === s && setError(e),
        ended: (e) => {
          if (session.current !== s) return;
          session.current = null;
          setState('stopped');
          if (e) setError(e);
        },
      },
      t,
    );
    session.current = s;
    setState('connecting');
    void s.start();
  };
  const status = state === 'idle' ? '' : state === 'stopped' ? t('play.stopped') : t(`talk.status.${state}` as Key);

  return (
    <div class="talk" data-state={state}>
      <p class="hint">{t('talk.intro')}</p>
      <div class="row">
        <ModelSelect id="talk-model" models={props.models} value={model} onChange={setModel} disabled={talking} />
        <Field id="talk-voice" label={t('play.voice')}>
          <select id="talk-voice" value={voice} disabled={talking} onChange={(e) => setVoice(e.currentTarget.value)}>
            {voices.map((v) => (
              <option value={v}>{v}</option>
            ))}
          </select>
        </Field>
      </div>
      <Field id="talk-instructions" label={t('play.instructions')}>
        <textarea id="talk-instructions" rows={2} disabled={talking} value={instructions} onInput={(e) => setInstructions(e.currentTarget.value)} />
      </Field>
      <div class="buttons">
        <button type="button" id="talk-toggle" class={talking ? 'secondary' : undefined} aria-pressed={talking} disabled={!talking && (!props.apiKey || !model)} onClick={toggle}>
          {talking ? t('talk.stop') : t('talk.start')}
        </button>
        <p class="talk-status" id="talk-status" role="status">
          {talking && <span class={`talk-dot ${state}`} aria-hidden="true" />}
          {status}
        </p>
      </div>
      <ErrorBox error={error} />
      <h2 class="small-head" id="talk-transcript-head">
        {t('talk.transcript')}
      </h2>
      {lines.length === 0 ? (
        <p class="hint" id="talk-transcript-empty">
          {t('talk.transcriptEmpty')}
        </p>
      ) : (
        <ol class="conversation" id="talk-transcript" aria-labelledby="talk-transcript-head">
          {lines.map((l) => (
            <li key={l.id} class={`msg ${l.role}`}>
              <span class="who">{l.role === 'user' ? t('play.you') : t('play.assistant')}</span>
              <div class="text">{l.text}</div>
              {l.interrupted && <span class="hint">{t('talk.interrupted')}</span>}
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}
