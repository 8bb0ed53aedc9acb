import { useLayoutEffect, useRef, useState } from 'preact/hooks';
import { admin, seg, type AdminModel, type AdminModels, type ModelTestResult } from './api.js';
import { Confirm, DataTable, useLoad } from './shared.js';
import type { ScreenProps } from './Console.js';
import { formatDate, formatNumber, useI18n, type Key } from '../i18n.js';
import { Dialog, ErrorBox, Field, Notice } from '../components/ui.js';

/** the keys the form shows at the model's level; every other key of an entry is kept as it was */
const FORM_MODEL_KEYS = ['name', 'type', 'pricing', 'routing', 'retries', 'fallbacks', 'deployments'];
/** the keys that belong to the model, never to a deployment (src/models/config.ts MODEL_ONLY) */
const MODEL_ONLY = [
  'name',
  'type',
  'owned_by',
  'pricing',
  'routing',
  'retries',
  'retry_backoff_ms',
  'max_retry_wait_ms',
  'breaker',
  'fallbacks',
  'context_window_fallbacks',
  'deployments',
];
/** the keys the form shows for each deployment */
const FORM_DEPLOYMENT_KEYS = ['id', 'provider', 'base_url', 'path', 'upstream_model', 'weight', 'rpm', 'tpm', 'api_key'];
const PROVIDERS = ['openai-compatible', 'llama', 'flite', 'espeak', 'pocketsphinx', 'whisper'];
const TYPES = ['text', 'embeddings', 'speech', 'transcription'];
const PRICES = ['input_per_million', 'output_per_million', 'cached_input_per_million'] as const;
/** the providers that read a file (`path`), and those for which it is required */
const PATH_PROVIDERS = ['llama', 'whisper', 'pocketsphinx'];

interface DeploymentForm {
  /** a stable key for the list (rows may be added and removed) */
  uid: number;
  id: string;
  provider: string;
  base_url: string;
  path: string;
  upstream_model: string;
  weight: string;
  rpm: string;
  tpm: string;
  /** a key typed now (write-only: never filled from the server) */
  apiKey: string;
  removeKey: boolean;
  /** a key was stored for this deployment when the form opened (under the id, or plain entry, it had then) */
  keySet: boolean;
  /** the deployment's other keys, as JSON (timeouts, health_check, context_window, api…) */
  other: string;
}

interface ModelForm {
  name: string;
  type: string;
  prices: Record<(typeof PRICES)[number], string>;
  routing: string;
  retries: string;
  fallbacks: string;
  /** the entry is written with a `deployments` list (else a plain entry: its one deployment's keys at the top) */
  listed: boolean;
  deployments: DeploymentForm[];
  /** the model's other keys, as JSON */
  other: string;
  /**
   * the places that held a key when the form opened (`api_key`, `deployments.<id>.api_key`) -> the origin of the
   * base_url it was given for: the server keeps a key for the same id (or a plain entry that stays one) and the same
   * origin only (docs/api.md)
   */
  secretOrigins: Record<string, string>;
}

let uids = 0;
const str = (v: unknown) => (v === undefined || v === null ? '' : String(v));
const json = (o: Record<string, unknown>) => (Object.keys(o).length ? JSON.stringify(o, null, 2) : '');
const pick = (o: Record<string, unknown>, keep: (k: string) => boolean) => Object.fromEntries(Object.entries(o).filter(([k]) => keep(k)));

function deploymentForm(d: Record<string, unknown>, keySet: boolean): DeploymentForm {
  return {
    uid: ++uids,
    id: str(d.id),
    provider: str(d.provider) || 'openai-compatible',
    base_url: str(d.base_url),
    path: str(d.path),
    upstream_model: str(d.upstream_model),
    weight: str(d.weight),
    rpm: str(d.rpm),
    tpm: str(d.tpm),
    apiKey: '',
    removeKey: false,
    keySet,
    other: json(pick(d, (k) => !FORM_DEPLOYMENT_KEYS.includes(k))),
  };
}

function emptyForm(): ModelForm {
  return {
    name: '',
    type: 'text',
    prices: { input_per_million: '', output_per_million: '', cached_input_per_million: '' },
    routing: '',
    retries: '',
    fallbacks: '',
    listed: false,
    deployments: [deploymentForm({}, false)],
    other: '',
    secretOrigins: {},
  };
}

/** The form of a stored model: its entry's keys in the fields, the keys the form has no field for as JSON. */
function formOf(m: AdminModel): ModelForm {
  const e = m.entry as Record<string, unknown>;
  const pricing = (e.pricing ?? {}) as Record<string, unknown>;
  const listed = Array.isArray(e.deployments);
  const deployments = listed
    ? (e.deployments as Array<Record<string, unknown>>).map((d) => deploymentForm(d, d.id !== undefined && m.secrets[`deployments.${str(d.id)}.api_key`] === true))
    : [
        deploymentForm(
          pick(e, (k) => !MODEL_ONLY.includes(k)),
          m.secrets.api_key === true,
        ),
      ];
  const secretOrigins: Record<string, string> = {};
  if (listed) {
    for (const d of e.deployments as Array<Record<string, unknown>>) {
      const place = `deployments.${str(d.id)}.api_key`;
      if (d.id !== undefined && m.secrets[place]) secretOrigins[place] = originOf(str(d.base_url));
    }
  } else if (m.secrets.api_key) secretOrigins.api_key = originOf(str(e.base_url));
  const otherPricing = pick(pricing, (k) => !(PRICES as readonly string[]).includes(k));
  const other = pick(e, (k) => !FORM_MODEL_KEYS.includes(k) && (listed || MODEL_ONLY.includes(k)));
  if (Object.keys(otherPricing).length) other.pricing = otherPricing;
  return {
    name: m.name,
    type: str(e.type) || m.type,
    prices: {
      input_per_million: str(pricing.input_per_million),
      output_per_million: str(pricing.output_per_million),
      cached_input_per_million: str(pricing.cached_input_per_million),
    },
    routing: str(e.routing),
    retries: str(e.retries),
    fallbacks: Array.isArray(e.fallbacks) ? e.fallbacks.join(', ') : '',
    listed,
    deployments,
    other: json(other),
    secretOrigins,
  };
}

/** scheme, host and port of a URL ('' when it is not one) */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '';
  }
}
/** the place the deployment's key is kept at when the form is saved: by its id in a list (none without one) */
const placeOf = (f: ModelForm, d: DeploymentForm) => (f.listed || f.deployments.length > 1 ? (d.id.trim() ? `deployments.${d.id.trim()}.api_key` : null) : 'api_key');
/**
 * What the server does with the stored key of a deployment left out of the entry: `kept` (a key is stored for its id,
 * given for the same origin), `origin` (one is stored for its id, but its base_url now goes to another origin: the
 * server refuses to guess, so the form removes it unless a key is typed), `none` (no key for its id: a new id, or a
 * deployment whose id changed, gets none).
 */
function keyFate(f: ModelForm, d: DeploymentForm): 'kept' | 'origin' | 'none' {
  const place = placeOf(f, d);
  const origin = place === null ? undefined : f.secretOrigins[place];
  if (origin === undefined) return 'none';
  return origin === originOf(d.base_url.trim()) ? 'kept' : 'origin';
}
const keyStays = (f: ModelForm, d: DeploymentForm) => keyFate(f, d) === 'kept';

class FormError extends Error {
  constructor(readonly field: Key) {
    super(field);
  }
}

function parseOther(text: string, field: Key): Record<string, unknown> {
  if (!text.trim()) return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new FormError(field);
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new FormError(field);
  return v as Record<string, unknown>;
}

/** A number field: empty leaves the key out; anything else is sent as the number it is (the server checks it). */
const num = (s: string) => (s.trim() === '' ? undefined : Number(s));
const put = (o: Record<string, unknown>, k: string, v: unknown) => {
  if (v !== undefined && v !== '') o[k] = v;
};

/** The entry the form says, for POST (new) or PUT (edit): an api_key only where one was typed, or null to remove it. */
function entryOf(f: ModelForm, editing: boolean): Record<string, unknown> {
  const e: Record<string, unknown> = parseOther(f.other, 'console.models.otherKeys');
  e.name = f.name.trim();
  put(e, 'type', f.type);
  const pricing: Record<string, unknown> = { ...((e.pricing as Record<string, unknown>) ?? {}) };
  for (const p of PRICES) put(pricing, p, num(f.prices[p]));
  if (Object.keys(pricing).length) e.pricing = pricing;
  else delete e.pricing;
  put(e, 'routing', f.routing);
  put(e, 'retries', num(f.retries));
  const fallbacks = f.fallbacks
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (fallbacks.length) e.fallbacks = fallbacks;
  const listed = f.listed || f.deployments.length > 1;
  const deployments = f.deployments.map((d) => {
    const o: Record<string, unknown> = parseOther(d.other, 'console.models.deploymentOtherKeys');
    put(o, 'id', d.id.trim());
    o.provider = d.provider;
    if (d.provider === 'openai-compatible') {
      put(o, 'base_url', d.base_url.trim());
      put(o, 'upstream_model', d.upstream_model.trim());
    }
    if (PATH_PROVIDERS.includes(d.provider)) put(o, 'path', d.path.trim());
    if (listed) put(o, 'weight', num(d.weight));
    put(o, 'rpm', num(d.rpm));
    put(o, 'tpm', num(d.tpm));
    if (d.provider === 'openai-compatible') {
      if (d.apiKey) o.api_key = d.apiKey;
      else if (editing && d.removeKey) o.api_key = null;
      // its base_url goes to another upstream now: the stored key is not sent there (the form said so), it is removed
      else if (editing && keyFate(f, d) === 'origin') o.api_key = null;
    }
    return o;
  });
  if (listed) e.deployments = deployments;
  else Object.assign(e, deployments[0]);
  return e;
}

/** The deployments of a model as the router names them (src/models/config.ts): id, else name#n; a plain entry its id or name. */
function deploymentsOf(m: AdminModel): Array<{ id: string; provider: string; where: string }> {
  const e = m.entry as Record<string, unknown>;
  const where = (d: Record<string, unknown>) => str(d.base_url) || str(d.path);
  if (Array.isArray(e.deployments))
    return (e.deployments as Array<Record<string, unknown>>).map((d, i) => ({ id: str(d.id) || `${m.name}#${i + 1}`, provider: str(d.provider), where: where(d) }));
  return [{ id: str(e.id) || m.name, provider: str(e.provider), where: where(e) }];
}

type Action = { action: 'disable' | 'enable' | 'remove'; model: AdminModel };

export function Models(_props: ScreenProps) {
  const { t, lang } = useI18n();
  const { data, error, reload } = useLoad(() => admin<AdminModels>('GET', '/models'), []);
  const models = data?.list ?? null;
  // what was just done, said in the page's language (a switch of language says it again in the other)
  const [done, setDone] = useState<{ key: Key; name: string } | null>(null);
  const [editing, setEditing] = useState<AdminModel | 'new' | null>(null);
  const [confirm, setConfirm] = useState<Action | null>(null);
  const [tests, setTests] = useState<Record<string, { running: boolean; result?: ModelTestResult; error?: unknown }>>({});

  // the sentence appears once the list shows the change
  const refresh = async (message: { key: Key; name: string }) => {
    setDone(null);
    await reload();
    setDone(message);
    // a removed model's row took the button that opened the confirmation with it: the focus goes on from the screen's
    // first control, not from the top of the page
    if (!document.activeElement || document.activeElement === document.body) document.getElementById('add-model')?.focus();
  };

  const runTest = async (model: string, deployment: string) => {
    const k = `${model}\n${deployment}`;
    setTests((s) => ({ ...s, [k]: { running: true } }));
    try {
      const result = await admin<ModelTestResult>('POST', `/models/${seg(model)}/test`, { deployment });
      setTests((s) => ({ ...s, [k]: { running: false, result } }));
    } catch (e) {
      setTests((s) => ({ ...s, [k]: { running: false, error: e } }));
    }
  };

  const n = (x: number) => formatNumber(lang, x);
  return (
    <section class="console-models">
      <div class="page-head">
        <h1 tabIndex={-1}>{t('console.models.title')}</h1>
        <button type="button" id="add-model" onClick={() => (setDone(null), setEditing('new'))}>
          {t('console.models.add')}
        </button>
      </div>
      <p class="hint">{t('console.models.intro')}</p>
      <p class="status" role="status" aria-live="polite">
        {done && t(done.key, { name: done.name })}
      </p>
      <ErrorBox error={error} />
      {models && models.length === 0 && <p class="empty">{t('console.models.none')}</p>}
      {models && models.length > 0 && (
        <DataTable
          id="models-table"
          caption={t('console.models.title')}
          hideCaption
          head={[
            t('console.models.name'),
            t('console.models.source'),
            t('console.models.type'),
            t('console.models.deployments'),
            t('console.models.enabled'),
            t('console.models.actions'),
          ]}
        >
          {models.map((m) => (
            <tr data-model={m.name}>
              <th scope="row">
                <span class="model-name">{m.name}</span>
                {m.updated_at !== null && <div class="muted">{t('console.models.updated', { when: formatDate(lang, m.updated_at, true), who: m.updated_by ?? '—' })}</div>}
              </th>
              <td data-label={t('console.models.source')}>
                <span class={`badge source-${m.source}`}>{t(`console.models.source.${m.source}`)}</span>
                {m.read_only && <div class="muted read-only">{t(m.source === 'file' ? 'console.models.fromFile' : 'console.models.readOnly')}</div>}
                {m.error && (
                  <div class="model-error">
                    <strong>{t('console.models.notServed')}</strong> {m.error}
                  </div>
                )}
              </td>
              <td data-label={t('console.models.type')}>{m.type}</td>
              <td data-label={t('console.models.deployments')}>
                <ul class="deployments">
                  {deploymentsOf(m).map((d) => {
                    const test = tests[`${m.name}\n${d.id}`];
                    return (
                      <li data-deployment={d.id}>
                        <div class="deployment-head">
                          <code>{d.id}</code>
                          <span class="muted">
                            {d.provider}
                            {d.where && ` · ${d.where}`}
                          </span>
                          <button
                            type="button"
                            class="secondary small"
                            disabled={test?.running}
                            aria-label={t('console.models.testNamed', { deployment: d.id })}
                            onClick={() => void runTest(m.name, d.id)}
                          >
                            {test?.running ? t('console.models.testing') : t('console.models.test')}
                          </button>
                        </div>
                        <div class="test-result" role="status" aria-live="polite">
                          {test?.result && (
                            <div class={`alert ${test.result.ok ? 'ok' : 'error'}`}>
                              <strong>
                                {test.result.ok ? t('console.models.testOk', { ms: n(test.result.latency_ms) }) : t('console.models.testFailed', { ms: n(test.result.latency_ms) })}
                              </strong>
                              {test.result.ok && test.result.output !== undefined && <div class="test-output">{test.result.output}</div>}
                              {test.result.error && (
                                <div class="detail">
                                  <code>{test.result.error.code}</code> {test.result.error.message}
                                </div>
                              )}
                            </div>
                          )}
                        </div>
                        {test?.error !== undefined && <ErrorBox error={test.error} />}
                      </li>
                    );
                  })}
                </ul>
              </td>
              <td data-label={t('console.models.enabled')}>
                <span class={`badge ${m.enabled ? 'active' : 'disabled'}`}>{m.enabled ? t('console.models.on') : t('console.models.off')}</span>
              </td>
              <td data-label={t('console.models.actions')} class="actions">
                {m.read_only ? (
                  <span class="muted">{t('console.models.noActions')}</span>
                ) : (
                  <>
                    <button type="button" class="secondary small" onClick={() => (setDone(null), setEditing(m))} aria-label={t('console.models.editNamed', { name: m.name })}>
                      {t('console.models.edit')}
                    </button>
                    <button
                      type="button"
                      class="secondary small"
                      onClick={() => setConfirm({ action: m.enabled ? 'disable' : 'enable', model: m })}
                      aria-label={t(m.enabled ? 'console.models.disableNamed' : 'console.models.enableNamed', { name: m.name })}
                    >
                      {t(m.enabled ? 'console.models.disable' : 'console.models.enable')}
                    </button>
                    <button
                      type="button"
                      class="danger small"
                      onClick={() => setConfirm({ action: 'remove', model: m })}
                      aria-label={t('console.models.removeNamed', { name: m.name })}
                    >
                      {t('console.models.remove')}
                    </button>
                  </>
                )}
              </td>
            </tr>
          ))}
        </DataTable>
      )}
      <ModelDialog
        editing={editing}
        onClose={() => setEditing(null)}
        onSaved={(m, created) => {
          setEditing(null);
          void refresh({ key: created ? 'console.models.addedDone' : 'console.models.savedDone', name: m.name });
        }}
      />
      <Confirm
        open={confirm !== null}
        id="model-confirm"
        title={confirm ? t(`console.models.${confirm.action}Title`, { name: confirm.model.name }) : ''}
        text={confirm ? t(`console.models.${confirm.action}Text`) : ''}
        yes={confirm ? t(`console.models.${confirm.action}`) : ''}
        danger={confirm?.action !== 'enable'}
        onClose={() => setConfirm(null)}
        onYes={async () => {
          const { action, model } = confirm!;
          const path = `/models/${seg(model.name)}`;
          if (action === 'remove') await admin('DELETE', path);
          else await admin('POST', `${path}/${action}`, {});
          void refresh({ key: `console.models.${action}Done`, name: model.name });
        }}
      />
    </section>
  );
}

function ModelDialog({ editing, onClose, onSaved }: { editing: AdminModel | 'new' | null; onClose: () => void; onSaved: (m: AdminModel, created: boolean) => void }) {
  const { t } = useI18n();
  const [form, setForm] = useState<ModelForm>(emptyForm);
  const [error, setError] = useState<unknown>(null);
  const [formError, setFormError] = useState<Key | null>(null);
  const [busy, setBusy] = useState(false);
  const isNew = editing === 'new';
  // a layout effect: the fields hold the model's values before any input can reach them; a key typed before is gone
  useLayoutEffect(() => {
    if (editing) {
      setForm(editing === 'new' ? emptyForm() : formOf(editing));
      setError(null);
      setFormError(null);
    } else setForm(emptyForm());
  }, [editing]);

  const set = (patch: Partial<ModelForm>) => setForm((f) => ({ ...f, ...patch }));
  const setDeployment = (uid: number, patch: Partial<DeploymentForm>) =>
    setForm((f) => ({ ...f, deployments: f.deployments.map((d) => (d.uid === uid ? { ...d, ...patch } : d)) }));
  const addDeployment = () => setForm((f) => ({ ...f, deployments: [...f.deployments, deploymentForm({ provider: f.deployments[0]?.provider ?? 'openai-compatible' }, false)] }));
  const removeDeployment = (uid: number) => setForm((f) => ({ ...f, deployments: f.deployments.filter((d) => d.uid !== uid) }));
  const list = useRef<HTMLFieldSetElement>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setFormError(null);
    let entry;
    try {
      entry = entryOf(form, !isNew);
    } catch (err) {
      if (err instanceof FormError) return setFormError(err.field);
      throw err;
    }
    setBusy(true);
    try {
      const saved = isNew ? await admin<AdminModel>('POST', '/models', { entry }) : await admin<AdminModel>('PUT', `/models/${seg((editing as AdminModel).name)}`, { entry });
      onSaved(saved, isNew);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  const multiple = form.deployments.length > 1 || form.listed;
  return (
    <Dialog open={editing !== null} id="model-dialog" wide title={isNew ? t('console.models.addTitle') : t('console.models.editTitle', { name: form.name })} onClose={onClose}>
      <form onSubmit={submit}>
        <div class="row">
          <Field id="model-name" label={t('console.models.name')} hint={isNew ? t('console.models.nameHint') : t('console.models.nameFixed')}>
            <input
              id="model-name"
              required
              maxLength={200}
              readOnly={!isNew}
              value={form.name}
              onInput={(e) => set({ name: e.currentTarget.value })}
              aria-describedby="model-name-hint"
              autoFocus
            />
          </Field>
          <Field id="model-type" label={t('console.models.type')}>
            <select id="model-type" value={form.type} onChange={(e) => set({ type: e.currentTarget.value })}>
              {TYPES.map((ty) => (
                <option value={ty}>{ty}</option>
              ))}
            </select>
          </Field>
        </div>
        <fieldset>
          <legend>{t('console.models.pricing')}</legend>
          <p class="hint">{t('console.models.pricingHint')}</p>
          <div class="row">
            {PRICES.map((p) => (
              <Field id={`model-${p}`} label={t(`console.models.price.${p}`)}>
                <input
                  id={`model-${p}`}
                  type="number"
                  min={0}
                  step="any"
                  inputMode="decimal"
                  value={form.prices[p]}
                  onInput={(e) => set({ prices: { ...form.prices, [p]: e.currentTarget.value } })}
                />
              </Field>
            ))}
          </div>
        </fieldset>
        <fieldset>
          <legend>{t('console.models.routing')}</legend>
          <div class="row">
            <Field id="model-routing" label={t('console.models.routingMode')}>
              <select id="model-routing" value={form.routing} onChange={(e) => set({ routing: e.currentTarget.value })}>
                <option value="">{t('console.models.routingDefault')}</option>
                <option value="weighted">{t('console.models.routing.weighted')}</option>
                <option value="least-busy">{t('console.models.routing.least-busy')}</option>
              </select>
            </Field>
            <Field id="model-retries" label={t('console.models.retries')} hint={t('console.models.retriesHint')}>
              <input
                id="model-retries"
                type="number"
                min={0}
                max={10}
                step={1}
                value={form.retries}
                onInput={(e) => set({ retries: e.currentTarget.value })}
                aria-describedby="model-retries-hint"
              />
            </Field>
            <Field id="model-fallbacks" label={t('console.models.fallbacks')} hint={t('console.models.fallbacksHint')}>
              <input id="model-fallbacks" value={form.fallbacks} onInput={(e) => set({ fallbacks: e.currentTarget.value })} aria-describedby="model-fallbacks-hint" />
            </Field>
          </div>
        </fieldset>
        <fieldset ref={list} class="deployment-list">
          <legend>{t('console.models.deployments')}</legend>
          {form.deployments.map((d, i) => {
            const id = (k: string) => `dep-${d.uid}-${k}`;
            const label = t('console.models.deploymentN', { n: i + 1 });
            return (
              <fieldset class="deployment" data-index={i}>
                <legend>{d.id ? `${label}: ${d.id}` : label}</legend>
                <div class="row">
                  <Field id={id('id')} label={t('console.models.deploymentId')} hint={t('console.models.deploymentIdHint')}>
                    <input
                      id={id('id')}
                      maxLength={200}
                      pattern="\S+"
                      required={(form.listed || form.deployments.length > 1) && d.provider === 'openai-compatible' && d.apiKey !== ''}
                      value={d.id}
                      onInput={(e) => setDeployment(d.uid, { id: e.currentTarget.value })}
                      aria-describedby={`${id('id')}-hint`}
                    />
                  </Field>
                  <Field id={id('provider')} label={t('console.models.provider')}>
                    <select id={id('provider')} value={d.provider} onChange={(e) => setDeployment(d.uid, { provider: e.currentTarget.value })}>
                      {PROVIDERS.map((p) => (
                        <option value={p}>{p}</option>
                      ))}
                    </select>
                  </Field>
                </div>
                {d.provider === 'openai-compatible' && (
                  <>
                    <div class="row">
                      <Field id={id('base_url')} label={t('console.models.baseUrl')} hint={t('console.models.baseUrlHint')}>
                        <input
                          id={id('base_url')}
                          type="url"
                          required
                          class="wide-input"
                          placeholder="https://…/v1"
                          value={d.base_url}
                          onInput={(e) => setDeployment(d.uid, { base_url: e.currentTarget.value })}
                          aria-describedby={`${id('base_url')}-hint`}
                        />
                      </Field>
                      <Field id={id('upstream_model')} label={t('console.models.upstreamModel')} hint={t('console.models.upstreamModelHint')}>
                        <input
                          id={id('upstream_model')}
                          value={d.upstream_model}
                          onInput={(e) => setDeployment(d.uid, { upstream_model: e.currentTarget.value })}
                          aria-describedby={`${id('upstream_model')}-hint`}
                        />
                      </Field>
                    </div>
                    <Field
                      id={id('api_key')}
                      label={t('console.models.apiKey')}
                      hint={
                        d.removeKey
                          ? t('console.models.apiKeyRemoving')
                          : keyStays(form, d)
                            ? t('console.models.apiKeySet')
                            : keyFate(form, d) === 'origin'
                              ? t('console.models.apiKeyOrigin')
                              : d.keySet
                                ? t('console.models.apiKeyMoved')
                                : t('console.models.apiKeyNone')
                      }
                    >
                      <div class="copy-row">
                        <input
                          id={id('api_key')}
                          type="password"
                          autoComplete="new-password"
                          spellcheck={false}
                          disabled={d.removeKey}
                          value={d.apiKey}
                          placeholder={keyStays(form, d) ? t('console.models.apiKeyKeep') : ''}
                          onInput={(e) => setDeployment(d.uid, { apiKey: e.currentTarget.value })}
                          aria-describedby={`${id('api_key')}-hint`}
                        />
                        {keyStays(form, d) && !d.removeKey && <span class="badge active key-set">{t('console.models.keyIsSet')}</span>}
                      </div>
                      {keyStays(form, d) && !isNew && (
                        <label class="check">
                          <input type="checkbox" checked={d.removeKey} onChange={(e) => setDeployment(d.uid, { removeKey: e.currentTarget.checked, apiKey: '' })} />
                          {t('console.models.removeKey')}
                        </label>
                      )}
                    </Field>
                  </>
                )}
                {PATH_PROVIDERS.includes(d.provider) && (
                  <Field id={id('path')} label={t('console.models.path')} hint={t('console.models.pathHint')}>
                    <input
                      id={id('path')}
                      required={d.provider !== 'pocketsphinx'}
                      class="wide-input"
                      value={d.path}
                      onInput={(e) => setDeployment(d.uid, { path: e.currentTarget.value })}
                      aria-describedby={`${id('path')}-hint`}
                    />
                  </Field>
                )}
                <div class="row">
                  {multiple && (
                    <Field id={id('weight')} label={t('console.models.weight')}>
                      <input id={id('weight')} type="number" min={0} step="any" value={d.weight} onInput={(e) => setDeployment(d.uid, { weight: e.currentTarget.value })} />
                    </Field>
                  )}
                  <Field id={id('rpm')} label={t('console.models.rpm')}>
                    <input id={id('rpm')} type="number" min={1} step={1} value={d.rpm} onInput={(e) => setDeployment(d.uid, { rpm: e.currentTarget.value })} />
                  </Field>
                  <Field id={id('tpm')} label={t('console.models.tpm')}>
                    <input id={id('tpm')} type="number" min={1} step={1} value={d.tpm} onInput={(e) => setDeployment(d.uid, { tpm: e.currentTarget.value })} />
                  </Field>
                </div>
                <details open={d.other !== ''}>
                  <summary>{t('console.models.deploymentOtherKeys')}</summary>
                  <Field id={id('other')} label={t('console.models.otherKeysLabel')} hint={t('console.models.otherKeysHint')}>
                    <textarea
                      id={id('other')}
                      class="mono"
                      rows={3}
                      spellcheck={false}
                      value={d.other}
                      onInput={(e) => setDeployment(d.uid, { other: e.currentTarget.value })}
                      aria-describedby={`${id('other')}-hint`}
                    />
                  </Field>
                </details>
                {form.deployments.length > 1 && (
                  <button
                    type="button"
                    class="danger small"
                    onClick={() => {
                      removeDeployment(d.uid);
                      // the focus goes to what stays: the list's "add" button
                      requestAnimationFrame(() => list.current?.querySelector<HTMLElement>('.add-deployment')?.focus());
                    }}
                  >
                    {t('console.models.removeDeployment', { n: i + 1 })}
                  </button>
                )}
              </fieldset>
            );
          })}
          <button type="button" class="secondary small add-deployment" onClick={addDeployment}>
            {t('console.models.addDeployment')}
          </button>
        </fieldset>
        <details open={form.other !== ''}>
          <summary>{t('console.models.otherKeys')}</summary>
          <Field id="model-other" label={t('console.models.otherKeysLabel')} hint={t('console.models.otherKeysHint')}>
            <textarea
              id="model-other"
              class="mono"
              rows={4}
              spellcheck={false}
              value={form.other}
              onInput={(e) => set({ other: e.currentTarget.value })}
              aria-describedby="model-other-hint"
            />
          </Field>
        </details>
        {formError && <Notice kind="warn">{t('console.models.notJson', { field: t(formError) })}</Notice>}
        <ErrorBox error={error} />
        <div class="buttons">
          <button type="submit" id="model-save" disabled={busy}>
            {isNew ? t('console.models.addButton') : t('common.save')}
          </button>
          <button type="button" class="secondary" onClick={onClose}>
            {t('common.cancel')}
          </button>
        </div>
      </form>
    </Dialog>
  );
}
