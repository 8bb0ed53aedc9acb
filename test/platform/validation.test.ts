import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Ajv } from 'ajv';
import addFormatsImport from 'ajv-formats';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { buildTestApp } from '../helpers/app.js';
import { Type, type TSchema } from 'typebox';
import {
  codePoints,
  compileDeferred,
  deferredValidators,
  describeValidationError,
  lazySerializers,
  lazyValidatorCompiler,
  paramPath,
  validatorCompiler,
} from '../../src/platform/http/validation.js';

const ajv = new Ajv({ allErrors: false, strict: false, verbose: true });
function problem(schema: TSchema, data: unknown, part = 'body') {
  const v = ajv.compile(schema);
  assert.equal(v(data), false, 'the data must fail');
  return describeValidationError(v.errors ?? [], part, data);
}

const Body = Type.Object(
  {
    model: Type.String({ minLength: 1 }),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    n: Type.Optional(Type.Integer({ minimum: 1, maximum: 8 })),
    stop: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 4 })])),
    tool_choice: Type.Optional(
      Type.Union([Type.Literal('none'), Type.Literal('auto'), Type.Literal('required'), Type.Object({ type: Type.Literal('function'), name: Type.String() })]),
    ),
    tools: Type.Optional(Type.Array(Type.Object({ type: Type.Literal('function'), name: Type.String({ maxLength: 64 }) }, { additionalProperties: false }))),
    name: Type.Optional(Type.String({ maxLength: 5 })),
  },
  { additionalProperties: false },
);

describe("validation messages: what is allowed, in OpenAI's codes and notation, in English and Chinese", () => {
  test('paths use OpenAI notation', () => {
    assert.equal(paramPath('/tools/0/name'), 'tools[0].name');
    assert.equal(paramPath('', 'model'), 'model');
    assert.equal(paramPath('/input/3', 'content'), 'input[3].content');
    assert.equal(paramPath('/a~1b'), 'a/b');
  });

  test('an unknown field is named, nested ones with their path', () => {
    assert.deepEqual(problem(Body, { model: 'm', foo: 1 }), { detail: 'unknown_parameter', param: 'foo', message: "Unknown parameter: 'foo'.", zh: "未知参数：'foo'。" });
    const p = problem(Body, { model: 'm', tools: [{ type: 'function', name: 'f', bogus: true }] });
    assert.equal(p.detail, 'unknown_parameter');
    assert.equal(p.param, 'tools[0].bogus');
    assert.equal(problem(Body, { model: 'm', x: 1 }, 'querystring').message, "Unknown query parameter: 'x'.");
  });

  test('a missing field', () => {
    const p = problem(Body, {});
    assert.equal(p.detail, 'missing_required_parameter');
    assert.equal(p.message, "Missing required parameter: 'model'.");
    assert.equal(p.zh, "缺少必需的参数：'model'。");
  });

  test('a wrong type says what was expected and what came', () => {
    const p = problem(Body, { model: 5 });
    assert.equal(p.detail, 'invalid_type');
    assert.equal(p.param, 'model');
    assert.equal(p.message, "Invalid type for 'model': expected a string, but got an integer instead.");
    assert.match(p.zh, /'model' 的类型无效：应为字符串，实际为整数/);
    assert.match(problem(Body, { model: 'm', temperature: '1' }).message, /expected a number, but got a string instead/);
  });

  test('a union of constants lists the values (and the other shapes it takes), not schema internals', () => {
    const p = problem(Body, { model: 'm', tool_choice: 'bogus' });
    assert.equal(p.detail, 'invalid_value');
    assert.equal(p.param, 'tool_choice');
    assert.equal(p.message, "Invalid value for 'tool_choice': 'bogus'. Supported values are: 'none', 'auto', 'required', or an object.");
    assert.doesNotMatch(p.message, /must be equal to constant|anyOf|must match/);
  });

  test("a union where one branch fits the type reports that branch's own rule (5 stops: too many)", () => {
    const p = problem(Body, { model: 'm', stop: ['a', 'b', 'c', 'd', 'e'] });
    assert.equal(p.detail, 'array_above_max_length');
    assert.equal(p.param, 'stop');
    assert.equal(p.message, "Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length 5 instead.");
  });

  test('a union where no branch fits the type lists the types', () => {
    const p = problem(Body, { model: 'm', stop: 5 });
    assert.equal(p.detail, 'invalid_type');
    assert.match(p.message, /^Invalid type for 'stop': expected a string or an array, but got an integer instead\.$/);
  });

  test('lengths and ranges, integers and decimals', () => {
    assert.equal(problem(Body, { model: '' }).detail, 'string_below_min_length');
    assert.equal(problem(Body, { model: 'm', name: 'toolong' }).detail, 'string_above_max_length');
    const hi = problem(Body, { model: 'm', temperature: 2.5 });
    assert.equal(hi.detail, 'decimal_above_max_value');
    assert.equal(hi.message, "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 2.5 instead.");
    assert.equal(problem(Body, { model: 'm', n: 0 }).detail, 'integer_below_min_value');
    assert.equal(problem(Body, { model: 'm', n: 9 }).detail, 'integer_above_max_value');
    assert.equal(problem(Body, { model: 'm', tools: [{ type: 'function', name: 'x'.repeat(65) }] }).param, 'tools[0].name');
  });

  test('a length is reported in the unit its rule counts: characters (code points, an emoji is one), in English and Chinese', () => {
    const long = problem(Body, { model: 'm', name: '😀'.repeat(6) });
    assert.equal(long.message, "Invalid 'name': string too long. Expected a string with maximum length 5, but got a string with length 6 instead.");
    assert.equal(long.zh, "'name' 无效：字符串过长。最多 5 个字符，实际为 6 个字符。");
    const short = problem(Type.Object({ code: Type.String({ minLength: 3 }) }), { code: '😀😀' });
    assert.equal(short.detail, 'string_below_min_length');
    assert.equal(short.message, "Invalid 'code': string too short. Expected a string with minimum length 3, but got a string with length 2 instead.");
    assert.equal(short.zh, "'code' 无效：字符串过短。至少 3 个字符，实际为 2 个字符。");
    // a value quoted in a message is cut between characters, never inside an emoji's surrogate pair
    const quoted = problem(Type.Object({ v: Type.String({ pattern: '^a+$' }) }), { v: 'b' + '😀'.repeat(40) });
    assert.match(quoted.message, /^Invalid value for 'v': 'b(😀){29}\.\.\.' is not in the expected format\.$/);
    assert.doesNotMatch(quoted.message + quoted.zh, /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
  });

  test("maxLength and minLength: Ajv's own rule (code points) and error, decided from the length without counting when it can be", () => {
    // the body validator of the routes, against Ajv's own keyword with the same options
    const stock = new Ajv({ allErrors: false, coerceTypes: false, useDefaults: true, strict: false, verbose: true });
    (((addFormatsImport as unknown as { default?: unknown }).default ?? addFormatsImport) as unknown as (a: Ajv) => void)(stock);
    const schema = Type.Object({
      s: Type.Optional(Type.String({ minLength: 2, maxLength: 4, pattern: '^[a-z\u{1F600}]+$' })),
      id: Type.Optional(Type.String({ maxLength: 3, format: 'uuid' })),
    });
    const ours = validatorCompiler({ schema, httpPart: 'body', method: 'POST', url: '/' }) as unknown as ((d: unknown) => boolean) & { errors?: unknown };
    const theirs = stock.compile(schema);
    const smile = '\u{1F600}';
    const hi = '\ud83d';
    const values = [
      'a',
      'ab',
      'abcd',
      'abcde',
      smile,
      smile + smile,
      smile.repeat(4),
      smile.repeat(5),
      'a' + smile,
      hi,
      hi + hi,
      hi.repeat(4),
      hi.repeat(5),
      'A',
      'ABCDE',
      'A'.repeat(9),
      '',
      smile + hi,
    ];
    for (const s of values) {
      for (const data of [{ s }, { id: s }]) {
        assert.equal(ours(data), theirs(data), JSON.stringify(data));
        assert.deepEqual(ours.errors ?? null, theirs.errors ?? null, JSON.stringify(data));
      }
    }
    assert.equal(codePoints(smile.repeat(3) + 'a' + hi), 5);
    // the count is reached only past what the length decides (a 10 Mi-character text is not walked)
    const code = String(ours);
    assert.match(code, /\.length > 4 && /);
    assert.match(code, /\.length < 2 \|\| \(/);
  });
});

describe('route validators compiled when first needed (start-up does not wait for Ajv)', () => {
  const route = (schema: TSchema) => ({ schema, httpPart: 'body', method: 'POST', url: '/x' });
  test('a lazy validator answers and reports errors exactly as the compiled one, compiling once', () => {
    const before = deferredValidators();
    const lazy = lazyValidatorCompiler(route(Body)) as ((d: unknown) => boolean) & { errors?: unknown };
    const eager = validatorCompiler(route(Body)) as ((d: unknown) => boolean) & { errors?: unknown };
    assert.equal(deferredValidators(), before + 1, 'nothing compiled when the route was added');
    for (const data of [{ model: 'm' }, { model: '' }, { model: 'm', foo: 1 }, { model: 'm', n: 9 }, 'text', null, { model: 'm', name: 'abcdef' }]) {
      assert.equal(lazy(data), eager(data), JSON.stringify(data));
      assert.deepEqual(lazy.errors ?? null, eager.errors ?? null, JSON.stringify(data));
    }
    assert.equal(deferredValidators(), before, 'compiled at its first call, and only once');
  });

  test('compileDeferred compiles what was not called, one per turn, and reports a schema that does not compile', async () => {
    const a = lazyValidatorCompiler(route(Type.Object({ a: Type.String() }))) as (d: unknown) => boolean;
    lazyValidatorCompiler(route(Type.Object({ b: Type.Integer() })));
    const broken = lazyValidatorCompiler(route({ type: 'object', properties: { c: { type: 'no-such-type' } } } as unknown as TSchema)) as (d: unknown) => boolean;
    assert.ok(deferredValidators() >= 3);
    const errors: unknown[] = [];
    await compileDeferred((e) => errors.push(e));
    assert.equal(deferredValidators(), 0);
    assert.equal(errors.length, 1);
    assert.match(String((errors[0] as Error).message), /no-such-type|type/);
    assert.equal(a({ a: 'x' }), true);
    assert.equal(a({ a: 1 }), false);
    // the broken one still fails loudly when called (its route answers 500), never passes unchecked
    assert.throws(() => broken({ c: 1 }));
  });
});

describe('response serializers compiled when first needed (an app gets ready without fast-json-stringify)', () => {
  const route = (schema: unknown) => ({ schema, method: 'GET', url: '/x', httpStatus: '200' });
  const Answer = Type.Object({ id: Type.String(), n: Type.Integer(), tags: Type.Optional(Type.Array(Type.String())) }, { additionalProperties: false });

  test("a lazy serializer writes exactly what Fastify's own writes, compiling once, at its first answer", () => {
    const eager = SerializerSelector()({}, {})(route(Answer));
    const before = deferredValidators();
    const lazy = lazySerializers()({}, {})(route(Answer));
    assert.equal(deferredValidators(), before + 1, 'nothing compiled when the route was added');
    // a field the schema does not name is left out, as fast-json-stringify leaves it out
    for (const doc of [
      { id: 'a', n: 1 },
      { id: 'b', n: 2, tags: ['x', 'y'] },
      { id: 'c', n: 3, secret: 'not in the schema' },
    ]) {
      assert.equal(lazy(doc), eager(doc), JSON.stringify(doc));
    }
    assert.ok(!lazy({ id: 'c', n: 3, secret: 's' }).includes('secret'));
    assert.equal(deferredValidators(), before, 'compiled at its first answer, and only once');
  });

  test('compileDeferred compiles the serializers not used yet, and reports one that does not compile', async () => {
    const factory = lazySerializers()({}, {});
    const unused = factory(route(Answer));
    const broken = factory(route({ type: 'object', properties: { a: { $ref: '#/definitions/missing' } } }));
    const errors: unknown[] = [];
    await compileDeferred((e) => errors.push(e));
    assert.equal(deferredValidators(), 0);
    assert.equal(errors.length, 1, 'the broken schema, and only it');
    assert.equal(unused({ id: 'a', n: 1, extra: true }), '{"id":"a","n":1}');
    // the broken one fails loudly when used (its route answers 500), never writes unchecked
    assert.throws(() => broken({ a: 1 }));
  });

  test("every route's validators and response serializers of the real app compile (what a start compiled before they were deferred)", async () => {
    await compileDeferred();
    const t = await buildTestApp({});
    try {
      assert.ok(deferredValidators() > 100, `the app's schemas wait to be compiled (${deferredValidators()})`);
      const errors: unknown[] = [];
      await compileDeferred((e) => errors.push(e));
      assert.deepEqual(errors.map(String), []);
      assert.equal(deferredValidators(), 0);
      // and the app answers through them: a portal answer with its response schema
      const res = await t.app.inject({ method: 'GET', url: '/v1/portal/api-keys', headers: { authorization: `Bearer ${await t.token('alice')}` } });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().meta.code, 0);
    } finally {
      await t.close();
    }
  });
});
