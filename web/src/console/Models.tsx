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
/** the number keys every deployment shows, whatever its provider */
const DEPLOYMENT_NUMBERS = ['weight', 'rpm', 'tpm'] as const;
const TYPES = ['text', 'embeddings', 'speech', 'transcription'];
const PRICES = ['input_per_million', 'output_per_million', 'cached_input_per_million', 'cache_write_input_per_million', 'cache_write_1h_input_per_million'] as const;
type Price = (typeof PRICES)[number];
/** the prices of prompt-cache writes: only these providers count cache writes (docs/models.md, pricing) */
const CACHE_WRITE_PRICES: readonly Price[] = ['cache_write_input_per_million', 'cache_write_1h_input_per_million'];
const CACHE_WRITE_PROVIDERS = ['anthropic', 'bedrock'];
/** the providers whose entries may hold a stored upstream key (Provider.storesKey: src/models/stored.ts) */
const KEYED = ['openai-compatible', 'anthropic', 'gemini', 'azure-openai'];

/**
 * One key of a provider's entry the form has a field for. A value the field cannot show as it is (a `false` for a
 * box that only says true, a value no option has) stays in the deployment's JSON field, so an entry opened and
 * saved again is the entry it was.
 */
interface ProviderField {
  key: string;
  kind: 'url' | 'text' | 'int' | 'bool' | 'list' | 'select';
  label: Key;
  hint?: Key;
  /** the hint's {env}: the variable read when the field is left empty */
  env?: string;
  required?: boolean;
  placeholder?: string;
  /** select: the choices besides '' (the default, `defaultLabel`) */
  options?: Array<{ value: string; label: Key }>;
  defaultLabel?: Key;
  /** the field spans the row */
  wide?: boolean;
  /** shown, and written, only when the deployment's other values say so */
  when?: (v: Record<string, string>) => boolean;
}

const entra = (v: Record<string, string>) => v.auth === 'entra';
const keyEnvField = (env?: string): ProviderField => ({
  key: 'api_key_env',
  kind: 'text',
  label: 'console.models.apiKeyEnv',
  hint: env ? 'console.models.apiKeyEnvDefaultHint' : 'console.models.apiKeyEnvHint',
  env,
  placeholder: env,
});
const pathField = (required: boolean): ProviderField => ({ key: 'path', kind: 'text', label: 'console.models.path', hint: 'console.models.pathHint', required, wide: true });

/** each provider's own fields (docs/models.md lists every key; the others go in the JSON field) */
const PROVIDER_FIELDS: Record<string, ProviderField[]> = {
  'openai-compatible': [
    { key: 'base_url', kind: 'url', label: 'console.models.baseUrl', hint: 'console.models.baseUrlHint', required: true, placeholder: 'https://…/v1' },
    { key: 'upstream_model', kind: 'text', label: 'console.models.upstreamModel', hint: 'console.models.upstreamModelHint' },
    keyEnvField(),
  ],
  anthropic: [
    { key: 'upstream_model', kind: 'text', label: 'console.models.upstreamModel', hint: 'console.models.anthropic.upstreamModelHint', placeholder: 'claude-sonnet-4-5' },
    { key: 'base_url', kind: 'url', label: 'console.models.baseUrl', hint: 'console.models.anthropic.baseUrlHint', placeholder: 'https://api.anthropic.com' },
    { key: 'max_tokens', kind: 'int', label: 'console.models.maxTokens', hint: 'console.models.anthropic.maxTokensHint', placeholder: '4096' },
    keyEnvField('ANTHROPIC_API_KEY'),
    { key: 'anthropic_beta', kind: 'list', label: 'console.models.anthropic.beta', hint: 'console.models.anthropic.betaHint', wide: true },
    { key: 'cache_prompt', kind: 'bool', label: 'console.models.anthropic.cachePrompt', hint: 'console.models.anthropic.cachePromptHint', wide: true },
  ],
  gemini: [
    { key: 'upstream_model', kind: 'text', label: 'console.models.upstreamModel', hint: 'console.models.gemini.upstreamModelHint', placeholder: 'gemini-2.5-flash' },
    { key: 'base_url', kind: 'url', label: 'console.models.baseUrl', hint: 'console.models.gemini.baseUrlHint', placeholder: 'https://generativelanguage.googleapis.com' },
    keyEnvField('GEMINI_API_KEY'),
  ],
  'azure-openai': [
    {
      key: 'endpoint',
      kind: 'url',
      label: 'console.models.azure.endpoint',
      hint: 'console.models.azure.endpointHint',
      required: true,
      placeholder: 'https://<resource>.openai.azure.com',
      wide: true,
    },
    { key: 'deployment', kind: 'text', label: 'console.models.azure.deployment', hint: 'console.models.azure.deploymentHint' },
    {
      key: 'surface',
      kind: 'select',
      label: 'console.models.azure.surface',
      defaultLabel: 'console.models.azure.surfaceDeployments',
      options: [{ value: 'v1', label: 'console.models.azure.surfaceV1' }],
    },
    { key: 'api_version', kind: 'text', label: 'console.models.azure.apiVersion', hint: 'console.models.azure.apiVersionHint' },
    {
      key: 'auth',
      kind: 'select',
      label: 'console.models.azure.auth',
      hint: 'console.models.azure.authHint',
      defaultLabel: 'console.models.azure.authKey',
      options: [{ value: 'entra', label: 'console.models.azure.authEntra' }],
    },
    { ...keyEnvField('AZURE_OPENAI_API_KEY'), when: (v) => !entra(v) },
    { key: 'tenant_id', kind: 'text', label: 'console.models.azure.tenant', hint: 'console.models.azure.tenantHint', env: 'AZURE_TENANT_ID', when: entra },
    { key: 'client_id', kind: 'text', label: 'console.models.azure.client', hint: 'console.models.azure.clientHint', env: 'AZURE_CLIENT_ID', when: entra },
    {
      key: 'client_secret_env',
      kind: 'text',
      label: 'console.models.azure.secretEnv',
      hint: 'console.models.azure.secretEnvHint',
      env: 'AZURE_CLIENT_SECRET',
      placeholder: 'AZURE_CLIENT_SECRET',
      when: entra,
    },
  ],
  bedrock: [
    {
      key: 'upstream_model',
      kind: 'text',
      label: 'console.models.upstreamModel',
      hint: 'console.models.bedrock.upstreamModelHint',
      placeholder: 'anthropic.claude-3-5-haiku-20241022-v1:0',
      wide: true,
    },
    { key: 'region', kind: 'text', label: 'console.models.bedrock.region', hint: 'console.models.bedrock.regionHint', placeholder: 'us-east-1' },
    { key: 'max_tokens', kind: 'int', label: 'console.models.maxTokens', hint: 'console.models.bedrock.maxTokensHint', placeholder: '4096' },
    { key: 'base_url', kind: 'url', label: 'console.models.baseUrl', hint: 'console.models.bedrock.baseUrlHint', wide: true },
  ],
  llama: [pathField(true)],
  whisper: [pathField(true)],
  pocketsphinx: [pathField(false)],
  flite: [],
  espeak: [],
};
const PROVIDERS = Object.keys(PROVIDER_FIELDS);
const fieldsOf = (provider: string) => PROVIDER_FIELDS[provider] ?? [];
/** the fields a deployment shows now (and writes) */
const shownFields = (d: { provider: string; values: Record<string, string> }) => fieldsOf(d.provider).filter((f) => !f.when || f.when(d.values));

/** A value as its field shows it, or undefined when the field cannot show it as it is (it stays in the JSON). */
function fieldValue(f: ProviderField, v: unknown): string | undefined {
  switch (f.kind) {
    case 'url':
    case 'text':
      return typeof v === 'string' && v !== '' && v === v.trim() ? v : undefined;
    case 'select':
      return typeof v === 'string' && f.options!.some((o) => o.value === v) ? v : undefined;
    case 'int':
      return typeof v === 'number' && Number.isFinite(v) ? String(v) : undefined;
    case 'bool':
      return v === true ? 'true' : undefined;
    case 'list':
      return Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'string' && x !== '' && x === x.trim() && !x.includes(',')) ? v.join(', ') : undefined;
  }
}

/** A field's value as the entry writes it (undefined: left out). */
function fieldEntry(f: ProviderField, s: string | undefined): unknown {
  const text = (s ?? '').trim();
  if (text === '') return undefined;
  switch (f.kind) {
    case 'int':
      return Number(text);
    case 'bool':
      return text === 'true' ? true : undefined;
    case 'list': {
      const items = text
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);
      return items.length ? items : undefined;
    }
    default:
      return text;
  }
}

interface DeploymentForm {
  /** a stable key for the list (rows may be added and removed) */
  uid: number;
  id: string;
  provider: string;
  /** the provider's fields (PROVIDER_FIELDS) by key, as typed; a provider changed keeps what the next one shares */
  values: Record<string, string>;
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
  prices: Record<Price, string>;
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
   * upstream address it was given for (base_url; azure-openai's endpoint): the server keeps a key for the same id (or
   * a plain entry that stays one) and the same origin only (docs/api.md)
   */
  secretOrigins: Record<string, string>;
}

let uids = 0;
const str = (v: unknown) => (v === undefined || v === null ? '' : String(v));
const json = (o: Record<string, unknown>) => (Object.keys(o).length ? JSON.stringify(o, null, 2) : '');
const pick = (o: Record<string, unknown>, keep: (k: string) => boolean) => Object.fromEntries(Object.entries(o).filter(([k]) => keep(k)));
/** the key of an entry that names its upstream's address, whose origin a stored key is bound to (Provider.urlKey) */
const urlKeyOf = (provider: string) => (provider === 'azure-openai' ? 'endpoint' : 'base_url');

function deploymentForm(d: Record<string, unknown>, keySet: boolean): DeploymentForm {
  const provider = str(d.provider) || 'openai-compatible';
  const values: Record<string, string> = {};
  for (const f of fieldsOf(provider)) {
    const v = fieldValue(f, d[f.key]);
    if (v !== undefined) values[f.key] = v;
  }
  // a value of a field the form hides (an Entra key without auth: entra) stays in the JSON, where it is seen
  for (const f of fieldsOf(provider)) if (f.when && !f.when(values)) delete values[f.key];
  const numbers = Object.fromEntries(DEPLOYMENT_NUMBERS.map((k) => [k, typeof d[k] === 'number' ? String(d[k]) : ''])) as Record<(typeof DEPLOYMENT_NUMBERS)[number], string>;
  const shown = new Set(['provider', ...(typeof d.id === 'string' ? ['id'] : []), ...Object.keys(values), ...DEPLOYMENT_NUMBERS.filter((k) => numbers[k] !== '')]);
  return {
    uid: ++uids,
    id: typeof d.id === 'string' ? d.id : '',
    provider,
    values,
    ...numbers,
    apiKey: '',
    removeKey: false,
    keySet,
    other: json(pick(d, (k) => !shown.has(k))),
  };
}

function emptyForm(): ModelForm {
  return {
    name: '',
    type: 'text',
    prices: Object.fromEntries(PRICES.map((p) => [p, ''])) as Record<Price, string>,
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
  const addressOf = (d: Record<string, unknown>) => str(d[urlKeyOf(str(d.provider))]);
  if (listed) {
    for (const d of e.deployments as Array<Record<string, unknown>>) {
      const place = `deployments.${str(d.id)}.api_key`;
      if (d.id !== undefined && m.secrets[place]) secretOrigins[place] = originOf(addressOf(d));
    }
  } else if (m.secrets.api_key) secretOrigins.api_key = originOf(addressOf(e));
  // a price the field shows as it is goes in the field; any other pricing key (or value) stays in the JSON
  const prices = Object.fromEntries(PRICES.map((p) => [p, typeof pricing[p] === 'number' ? String(pricing[p]) : ''])) as Record<Price, string>;
  const otherPricing = pick(pricing, (k) => !(PRICES as readonly string[]).includes(k) || prices[k as Price] === '');
  const other = pick(
    e,
    (k) =>
      (!FORM_MODEL_KEYS.includes(k) && (listed || MODEL_ONLY.includes(k))) ||
      (k === 'routing' && typeof e.routing !== 'string') ||
      (k === 'retries' && typeof e.retries !== 'number') ||
      (k === 'fallbacks' && !Array.isArray(e.fallbacks)),
  );
  if (Object.keys(otherPricing).length) other.pricing = otherPricing;
  return {
    name: m.name,
    type: str(e.type) || m.type,
    prices,
    routing: typeof e.routing === 'string' ? e.routing : '',
    retries: typeof e.retries === 'number' ? String(e.retries) : '',
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
 * given for the same origin), `origin` (one is stored for its id, but its address now goes to another origin: the
 * server refuses to guess, so the form removes it unless a key is typed), `none` (no key for its id: a new id, or a
 * deployment whose id changed, gets none).
 */
function keyFate(f: ModelForm, d: DeploymentForm): 'kept' | 'origin' | 'none' {
  const place = placeOf(f, d);
  const origin = place === null ? undefined : f.secretOrigins[place];
  if (origin === undefined) return 'none';
  return origin === originOf((d.values[urlKeyOf(d.provider)] ?? '').trim()) ? 'kept' : 'origin';
}
const keyStays = (f: ModelForm, d: DeploymentForm) => keyFate(f, d) === 'kept';
/** the variable the deployment names for its key (api_key_env): then no key is stored for it */
const keyEnvOf = (d: DeploymentForm) => (shownFields(d).some((x) => x.key === 'api_key_env') ? (d.values.api_key_env ?? '').trim() : '');
/**
 * Whether the deployment shows the upstream key's field: a provider that stores keys; with azure-openai's
 * `auth: entra` only while a key is stored there (it is used instead of Entra ID until it is removed).
 */
const hasKeyField = (f: ModelForm, d: DeploymentForm) => KEYED.includes(d.provider) && (!entra(d.values) || keyFate(f, d) !== 'none');

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
    for (const field of shownFields(d)) put(o, field.key, fieldEntry(field, d.values[field.key]));
    if (listed) put(o, 'weight', num(d.weight));
    put(o, 'rpm', num(d.rpm));
    put(o, 'tpm', num(d.tpm));
    // a key named by its variable is read from Portico's environment: none is sent (the server drops a stored one)
    if (hasKeyField(f, d) && !keyEnvOf(d)) {
      if (d.apiKey) o.api_key = d.apiKey;
      else if (editing && d.removeKey) o.api_key = null;
      // its address goes to another upstream now: the stored key is not sent there (the form said so), it is removed
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
  const where = (d: Record<string, unknown>) => str(d.base_url) || str(d.endpoint) || str(d.path) || str(d.region);
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
  const setValue = (uid: number, key: string, v: string) =>
    setForm((f) => ({ ...f, deployments: f.deployments.map((d) => (d.uid === uid ? { ...d, values: { ...d.values, [key]: v } } : d)) }));
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
  // the prices of cache writes: where a provider counts them (anthropic, bedrock), or where the model has one
  const cacheWrites = form.deployments.some((d) => CACHE_WRITE_PROVIDERS.includes(d.provider)) || CACHE_WRITE_PRICES.some((p) => form.prices[p] !== '');
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
          {cacheWrites && <p class="hint">{t('console.models.cacheWriteHint')}</p>}
          <div class="row">
            {PRICES.filter((p) => !CACHE_WRITE_PRICES.includes(p) || cacheWrites).map((p) => (
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
                      required={(form.listed || form.deployments.length > 1) && hasKeyField(form, d) && !keyEnvOf(d) && d.apiKey !== ''}
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
                <div class="row provider-fields">
                  {shownFields(d).map((f) => (
                    <ProviderInput field={f} id={id(f.key)} value={d.values[f.key] ?? ''} onChange={(v) => setValue(d.uid, f.key, v)} />
                  ))}
                </div>
                {d.provider === 'bedrock' && <p class="hint">{t('console.models.bedrock.credentials')}</p>}
                {d.keySet && !KEYED.includes(d.provider) && <p class="hint">{t('console.models.keyDropped')}</p>}
                {hasKeyField(form, d) && (
                  <Field
                    id={id('api_key')}
                    label={t('console.models.apiKey')}
                    hint={
                      keyEnvOf(d)
                        ? t(d.keySet ? 'console.models.apiKeyFromEnvSet' : 'console.models.apiKeyFromEnv', { env: keyEnvOf(d) })
                        : [
                            d.removeKey
                              ? t('console.models.apiKeyRemoving')
                              : keyStays(form, d)
                                ? t('console.models.apiKeySet')
                                : keyFate(form, d) === 'origin'
                                  ? t('console.models.apiKeyOrigin')
                                  : d.keySet
                                    ? t('console.models.apiKeyMoved')
                                    : t('console.models.apiKeyNone'),
                            entra(d.values) && !d.removeKey ? t('console.models.azure.keyBeforeEntra') : '',
                          ]
                            .filter(Boolean)
                            .join(' ')
                    }
                  >
                    <div class="copy-row">
                      <input
                        id={id('api_key')}
                        type="password"
                        autoComplete="new-password"
                        spellcheck={false}
                        disabled={d.removeKey || keyEnvOf(d) !== ''}
                        value={keyEnvOf(d) ? '' : d.apiKey}
                        placeholder={keyStays(form, d) && !keyEnvOf(d) ? t('console.models.apiKeyKeep') : ''}
                        onInput={(e) => setDeployment(d.uid, { apiKey: e.currentTarget.value })}
                        aria-describedby={`${id('api_key')}-hint`}
                      />
                      {keyStays(form, d) && !d.removeKey && !keyEnvOf(d) && <span class="badge active key-set">{t('console.models.keyIsSet')}</span>}
                    </div>
                    {keyStays(form, d) && !isNew && !keyEnvOf(d) && (
                      <label class="check">
                        <input type="checkbox" checked={d.removeKey} onChange={(e) => setDeployment(d.uid, { removeKey: e.currentTarget.checked, apiKey: '' })} />
                        {t('console.models.removeKey')}
                      </label>
                    )}
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

/** One field of a provider's entry (PROVIDER_FIELDS), labelled and with its hint. */
function ProviderInput({ field: f, id, value, onChange }: { field: ProviderField; id: string; value: string; onChange: (v: string) => void }) {
  const { t } = useI18n();
  const hint = f.hint ? t(f.hint, f.env ? { env: f.env } : undefined) : undefined;
  const described = hint ? `${id}-hint` : undefined;
  const cls = f.wide ? 'span-row' : undefined;
  if (f.kind === 'bool') {
    return (
      <div class={`field ${cls ?? ''}`}>
        <label class="check">
          <input id={id} type="checkbox" checked={value === 'true'} onChange={(e) => onChange(e.currentTarget.checked ? 'true' : '')} aria-describedby={described} />
          {t(f.label)}
        </label>
        {hint && (
          <div class="hint" id={described}>
            {hint}
          </div>
        )}
      </div>
    );
  }
  return (
    <div class={cls}>
      <Field id={id} label={t(f.label)} hint={hint}>
        {f.kind === 'select' ? (
          <select id={id} value={value} onChange={(e) => onChange(e.currentTarget.value)} aria-describedby={described}>
            <option value="">{t(f.defaultLabel!)}</option>
            {f.options!.map((o) => (
              <option value={o.value}>{t(o.label)}</option>
            ))}
          </select>
        ) : (
          <input
            id={id}
            type={(f.kind === 'url' ? 'url' : f.kind === 'int' ? 'number' : 'text') as 'text'}
            min={f.kind === 'int' ? 1 : undefined}
            step={f.kind === 'int' ? 1 : undefined}
            required={f.required}
            spellcheck={false}
            placeholder={f.placeholder}
            value={value}
            onInput={(e) => onChange(e.currentTarget.value)}
            aria-describedby={described}
          />
        )}
      </Field>
    </div>
  );
}
