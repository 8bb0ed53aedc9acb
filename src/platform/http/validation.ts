import type { ErrorObject } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import { SerializerSelector, type SerializerFactory } from '@fastify/fast-json-stringify-compiler';
import type { ValidationDetail } from '../errors.js';
import { codePoints } from '../code-points.js';
import { makeAjv } from './ajv.js';
import { prevalidated } from './json-body.js';

/** characters (code points: a surrogate pair is one, as JSON Schema counts) of a string, the way Ajv counts them */
export { codePoints };

// JSON bodies are taken as they are (a string is not a number); query strings and path parameters are text
// on the wire, so they are coerced. Every schema refuses unknown fields (see docs/api.md, "Validation").
const bodyAjv = makeAjv(false);
const paramAjv = makeAjv(true);

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : paramAjv;
  return ajv.compile(schema as object) as ReturnType<FastifySchemaCompiler<unknown>>;
};

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

/** validators and serializers made lazily and not compiled yet, in the order their routes were added */
const deferred = new Set<() => void>();

/**
 * The route validator of every app (`portico serve` and the tests' apps): Ajv compiles a route's schemas when the
 * route is first called (or when compileDeferred() gets to it after start-up), not while the server starts.
 * Compiling the ~100 route schemas was ~0.18 s of a ~1.3 s start on PostgreSQL (docs/performance.md, "Start-up and
 * memory"). The validator keeps Ajv's contract that Fastify reads: false with `.errors` set.
 */
export const lazyValidatorCompiler: FastifySchemaCompiler<unknown> = (route) => {
  let compiled: Validate | undefined;
  const compile = () => {
    compiled ??= validatorCompiler(route) as Validate;
    deferred.delete(compile);
    return compiled;
  };
  deferred.add(compile);
  const body = route.httpPart === 'body' && route.schema !== null && typeof route.schema === 'object' ? route.schema : undefined;
  const validate: Validate = (data) => {
    // a large body the JSON worker thread validated against this very schema, with the same Ajv (json-body.ts)
    if (body !== undefined && prevalidated(data, body)) {
      validate.errors = null;
      return true;
    }
    const fn = compiled ?? compile();
    const ok = fn(data);
    validate.errors = fn.errors;
    return ok;
  };
  return validate as ReturnType<FastifySchemaCompiler<unknown>>;
};

/**
 * The response serializers, made as Fastify makes them (fast-json-stringify, through Fastify's own compiler, with the
 * same shared schemas and options), but each compiled at its first answer or by compileDeferred() after start-up
 * instead of all of them while the app gets ready: fast-json-stringify builds a serializer and an Ajv instance for
 * every status of every route with a response schema, ~0.2-0.3 s of CPU per app (docs/performance.md, "The test
 * suite"). What a serializer writes is the same; a schema it cannot compile fails its route's answer (500) and is
 * reported by compileDeferred(), instead of failing the start.
 */
export function lazySerializers(build: SerializerFactory = SerializerSelector()): SerializerFactory {
  return (externalSchemas, options) => {
    const compiler = build(externalSchemas, options);
    return (route) => {
      let compiled: ((doc: unknown) => string) | undefined;
      const compile = () => {
        compiled ??= compiler(route);
        deferred.delete(compile);
        return compiled;
      };
      deferred.add(compile);
      return (doc: unknown) => (compiled ?? compile())(doc);
    };
  };
}

/**
 * Compiles the validators and serializers nobody has used yet, one per turn of the event loop, so that a server that
 * has started answering does not stall on them and the first call of a route does not pay its compilation. A schema
 * that does not compile is reported through `onError` (the route's first call answers 500 with the same error).
 */
export function compileDeferred(onError: (e: unknown) => void = () => {}): Promise<void> {
  return new Promise((resolve) => {
    const next = () => {
      const first = deferred.values().next();
      if (first.done) return resolve();
      try {
        first.value();
      } catch (e) {
        deferred.delete(first.value);
        onError(e);
      }
      setImmediate(next);
    };
    setImmediate(next);
  });
}

/** validators and serializers not compiled yet (tests) */
export function deferredValidators(): number {
  return deferred.size;
}

/** A validation failure as the client sees it: OpenAI's code, the parameter, and the message in English and Chinese. */
export interface ValidationProblem {
  detail?: ValidationDetail;
  param: string | null;
  message: string;
  zh: string;
}

/** `/tools/0/name` -> `tools[0].name` (the parameter notation of OpenAI's errors) */
export function paramPath(instancePath: string, extra?: string): string {
  const parts = instancePath.split('/').slice(1);
  if (extra !== undefined) parts.push(extra);
  let out = '';
  for (const p of parts) {
    const key = p.replace(/~1/g, '/').replace(/~0/g, '~');
    out += /^\d+$/.test(key) ? `[${key}]` : out ? `.${key}` : key;
  }
  return out;
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'an integer' : 'a decimal';
  if (typeof v === 'string') return 'a string';
  if (typeof v === 'boolean') return 'a boolean';
  return 'an object';
}

const TYPE_EN: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  object: 'an object',
  array: 'an array',
  null: 'null',
};
const TYPE_ZH: Record<string, string> = { string: '字符串', number: '数字', integer: '整数', boolean: '布尔值', object: '对象', array: '数组', null: 'null' };
const zhType = (v: unknown) =>
  TYPE_ZH[v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v] ?? '对象';

function valueAt(data: unknown, instancePath: string): unknown {
  let v = data;
  for (const p of instancePath.split('/').slice(1)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[p.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return v;
}

/** the first 60 UTF-16 units of a text, never half of a surrogate pair */
const head60 = (v: string) => (/[\ud800-\udbff]/.test(v.charAt(59)) ? v.slice(0, 59) : v.slice(0, 60));
const show = (v: unknown) => (typeof v === 'string' ? `'${v.length > 60 ? `${head60(v)}...` : v}'` : (JSON.stringify(v)?.slice(0, 60) ?? String(v)));
const listOr = (xs: string[]) => (xs.length <= 1 ? (xs[0] ?? '') : `${xs.slice(0, -1).join(', ')} or ${xs[xs.length - 1]}`);
const depth = (e: ErrorObject) => e.instancePath.split('/').length + (e.keyword === 'required' || e.keyword === 'additionalProperties' ? 1 : 0);

/** How telling an error is about what the client got wrong (a type or constant mismatch is often just a union branch that did not apply). */
function weight(e: ErrorObject): number {
  switch (e.keyword) {
    case 'additionalProperties':
      return 5;
    case 'required':
      return 4;
    case 'anyOf':
    case 'oneOf':
      return 0;
    case 'type':
    case 'const':
    case 'enum':
      return 1;
    default:
      return 3;
  }
}

/**
 * One clear sentence (in English and Chinese), the parameter in OpenAI's notation and OpenAI's error code, from
 * Ajv's errors. Unions (anyOf) are described by what they accept: the values, or the types.
 */
export function describeValidationError(errors: ErrorObject[] | undefined, part: string | undefined, data?: unknown): ValidationProblem {
  const all = errors ?? [];
  if (all.length === 0) return { param: null, message: 'The request is not valid.', zh: '请求无效。' };
  // the deepest error says the most; among equals, the most telling kind
  const e = [...all].sort((a, b) => depth(b) - depth(a) || weight(b) - weight(a))[0]!;
  const params = e.params as Record<string, unknown>;
  const where = part === 'querystring' ? 'query parameter' : part === 'params' ? 'path parameter' : 'parameter';
  const whereZh = part === 'querystring' ? '查询参数' : part === 'params' ? '路径参数' : '参数';
  if (e.keyword === 'additionalProperties') {
    const param = paramPath(e.instancePath, String(params.additionalProperty));
    return { detail: 'unknown_parameter', param, message: `Unknown ${where}: '${param}'.`, zh: `未知${whereZh}：'${param}'。` };
  }
  if (e.keyword === 'required') {
    const param = paramPath(e.instancePath, String(params.missingProperty));
    return { detail: 'missing_required_parameter', param, message: `Missing required ${where}: '${param}'.`, zh: `缺少必需的${whereZh}：'${param}'。` };
  }
  const param = paramPath(e.instancePath) || null;
  const name = param ?? (part === 'body' ? 'body' : (part ?? 'request'));
  const value = 'data' in e ? e.data : valueAt(data, e.instancePath);
  const schemaType = (e.parentSchema as { type?: unknown } | undefined)?.type;
  // every error at this path that is a type or a constant: a union, described by what it accepts
  const here = all.filter((x) => x.instancePath === e.instancePath);
  const consts = here.flatMap((x) =>
    x.keyword === 'const' ? [(x.params as { allowedValue: unknown }).allowedValue] : x.keyword === 'enum' ? ((x.params as { allowedValues: unknown[] }).allowedValues ?? []) : [],
  );
  const types = [...new Set(here.filter((x) => x.keyword === 'type').flatMap((x) => String((x.params as { type: string }).type).split(',')))];
  if ((e.keyword === 'const' || e.keyword === 'enum' || e.keyword === 'type') && consts.length > 0) {
    const allowed = consts.map(show);
    const alsoTypes = types.filter((t) => !consts.some((c) => typeof c === t));
    const tail = alsoTypes.length ? `, or ${listOr(alsoTypes.map((t) => TYPE_EN[t] ?? t))}` : '';
    return {
      detail: 'invalid_value',
      param,
      message: `Invalid value for '${name}': ${show(value)}. Supported values are: ${allowed.join(', ')}${tail}.`,
      zh: `'${name}' 的值无效：${show(value)}。支持的值：${allowed.join('、')}${alsoTypes.length ? `，或${alsoTypes.map((t) => TYPE_ZH[t] ?? t).join('、')}` : ''}。`,
    };
  }
  if (e.keyword === 'type' || e.keyword === 'anyOf' || e.keyword === 'oneOf') {
    const expected = types.length ? types : ['a valid value'];
    return {
      detail: 'invalid_type',
      param,
      message: `Invalid type for '${name}': expected ${listOr(expected.map((t) => TYPE_EN[t] ?? t))}, but got ${typeName(value)} instead.`,
      zh: `'${name}' 的类型无效：应为${expected.map((t) => TYPE_ZH[t] ?? t).join('或')}，实际为${zhType(value)}。`,
    };
  }
  const limit = params.limit as number;
  switch (e.keyword) {
    // the length reported is the one the rule counts: characters (code points), so 101 emoji are 101, not 202
    case 'maxLength': {
      const got = typeof value === 'string' ? codePoints(value) : '?';
      return {
        detail: 'string_above_max_length',
        param,
        message: `Invalid '${name}': string too long. Expected a string with maximum length ${limit}, but got a string with length ${got} instead.`,
        zh: `'${name}' 无效：字符串过长。最多 ${limit} 个字符，实际为 ${got} 个字符。`,
      };
    }
    case 'minLength': {
      if (limit === 1)
        return {
          detail: 'string_below_min_length',
          param,
          message: `Invalid '${name}': empty string. Expected a string with minimum length 1.`,
          zh: `'${name}' 无效：不能为空字符串。`,
        };
      const got = typeof value === 'string' ? codePoints(value) : '?';
      return {
        detail: 'string_below_min_length',
        param,
        message: `Invalid '${name}': string too short. Expected a string with minimum length ${limit}, but got a string with length ${got} instead.`,
        zh: `'${name}' 无效：字符串过短。至少 ${limit} 个字符，实际为 ${got} 个字符。`,
      };
    }
    case 'maxItems':
      return {
        detail: 'array_above_max_length',
        param,
        message: `Invalid '${name}': array too long. Expected an array with maximum length ${limit}, but got an array with length ${Array.isArray(value) ? value.length : '?'} instead.`,
        zh: `'${name}' 无效：数组过长。最多 ${limit} 项，实际为 ${Array.isArray(value) ? value.length : '?'} 项。`,
      };
    case 'minItems':
      return {
        detail: 'array_below_min_length',
        param,
        message: `Invalid '${name}': array too short. Expected an array with minimum length ${limit}.`,
        zh: `'${name}' 无效：数组过短，至少 ${limit} 项。`,
      };
    case 'maxProperties':
      return { detail: 'invalid_value', param, message: `Invalid '${name}': too many keys. Expected at most ${limit}.`, zh: `'${name}' 无效：键过多，最多 ${limit} 个。` };
    case 'maximum':
    case 'exclusiveMaximum': {
      const int = schemaType === 'integer';
      return {
        detail: int ? 'integer_above_max_value' : 'decimal_above_max_value',
        param,
        message: `Invalid '${name}': ${int ? 'integer' : 'decimal'} above maximum value. Expected a value <${e.keyword === 'maximum' ? '=' : ''} ${limit}, but got ${String(value)} instead.`,
        zh: `'${name}' 无效：超过最大值 ${limit}（实际为 ${String(value)}）。`,
      };
    }
    case 'minimum':
    case 'exclusiveMinimum': {
      const int = schemaType === 'integer';
      return {
        detail: int ? 'integer_below_min_value' : 'decimal_below_min_value',
        param,
        message: `Invalid '${name}': ${int ? 'integer' : 'decimal'} below minimum value. Expected a value >${e.keyword === 'minimum' ? '=' : ''} ${limit}, but got ${String(value)} instead.`,
        zh: `'${name}' 无效：低于最小值 ${limit}（实际为 ${String(value)}）。`,
      };
    }
    case 'pattern':
    case 'format': {
      // a schema says what it expects in words (`x-expected`, `x-expected-zh`); a regex means nothing to a caller
      const said = e.parentSchema as { 'x-expected'?: string; 'x-expected-zh'?: string } | undefined;
      if (said?.['x-expected']) {
        return {
          detail: 'invalid_value',
          param,
          message: `Invalid value for '${name}': ${show(value)}. Expected ${said['x-expected']}.`,
          zh: `'${name}' 的值无效：${show(value)}。应为${said['x-expected-zh'] ?? said['x-expected']}。`,
        };
      }
      return {
        detail: 'invalid_value',
        param,
        message: `Invalid value for '${name}': ${show(value)} is not in the expected format.`,
        zh: `'${name}' 的值格式不正确：${show(value)}。`,
      };
    }
    default:
      return { detail: 'invalid_value', param, message: `Invalid value for '${name}'.`, zh: `'${name}' 的值无效。` };
  }
}
