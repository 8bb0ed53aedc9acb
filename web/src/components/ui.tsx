import type { ComponentChildren } from 'preact';
import { useLayoutEffect, useRef } from 'preact/hooks';
import { describeError, useI18n } from '../i18n.js';
import { linkClick } from '../router.js';

/** A modal dialog on the native <dialog> element: focus stays inside, Escape closes it, focus returns after. */
export function Dialog(props: { open: boolean; title: string; onClose: () => void; children: ComponentChildren; id?: string; wide?: boolean }) {
  const ref = useRef<HTMLDialogElement>(null);
  const opener = useRef<Element | null>(null);
  // a layout effect: the dialog is open (and its field focused) when the key press that opened it is handled
  useLayoutEffect(() => {
    const d = ref.current!;
    if (props.open && !d.open) {
      opener.current = document.activeElement;
      d.showModal();
      d.querySelector<HTMLElement>('[autofocus]')?.focus();
    } else if (!props.open && d.open) {
      d.close();
      (opener.current as HTMLElement | null)?.focus?.();
    }
  }, [props.open]);
  const titleId = `${props.id ?? 'dialog'}-title`;
  return (
    <dialog
      ref={ref}
      id={props.id}
      class={props.wide ? 'wide' : undefined}
      aria-labelledby={titleId}
      onCancel={(e) => {
        e.preventDefault();
        props.onClose();
      }}
    >
      {props.open && (
        <>
          <h2 id={titleId}>{props.title}</h2>
          {props.children}
        </>
      )}
    </dialog>
  );
}

/** An API error shown in the person's language (role=alert: screen readers announce it). */
export function ErrorBox({ error }: { error: unknown }) {
  const { lang, t } = useI18n();
  if (!error) return null;
  const { message, detail } = describeError(error, lang, t);
  return (
    <div class="alert error" role="alert">
      <strong>{message}</strong>
      {detail && <div class="detail">{detail}</div>}
      {(error as { code?: string }).code === 'session_expired' && (
        <div>
          <a href="/signin" onClick={linkClick}>
            {t('err.signInAgain')}
          </a>
        </div>
      )}
    </div>
  );
}

export function Notice({ kind = 'info', children }: { kind?: 'info' | 'warn' | 'ok'; children: ComponentChildren }) {
  return (
    <div class={`alert ${kind}`} role={kind === 'warn' ? 'alert' : 'status'}>
      {children}
    </div>
  );
}

export function Field(props: { id: string; label: string; hint?: string; children: ComponentChildren }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint && (
        <div class="hint" id={`${props.id}-hint`}>
          {props.hint}
        </div>
      )}
    </div>
  );
}

/** The playground's choice of a model of one kind; the first is chosen when the current one is not offered. */
export function ModelSelect({ id, models, value, onChange, disabled }: { id: string; models: string[]; value: string; onChange: (v: string) => void; disabled?: boolean }) {
  const { t } = useI18n();
  // a layout effect: the default is chosen before any input, so it never replaces a model the user picked
  useLayoutEffect(() => {
    if (!models.includes(value) && models.length) onChange(models[0]);
  }, [models.join(',')]);
  return (
    <Field id={id} label={t('play.model')}>
      <select id={id} value={value} disabled={disabled} onChange={(e) => onChange(e.currentTarget.value)}>
        {models.length === 0 && <option value="">{t('play.noModels')}</option>}
        {models.map((m) => (
          <option value={m}>{m}</option>
        ))}
      </select>
    </Field>
  );
}
