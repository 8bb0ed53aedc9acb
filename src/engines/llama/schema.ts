/**
 * JSON Schema -> the subset node-llama-cpp turns into a GBNF grammar (GbnfJsonSchema), and the schema of the
 * forced tool-call protocol.
 *
 * Conversions: anyOf -> oneOf, a single allOf is inlined, `type: [..]` kept (supported), objects without
 * properties accept any keys, keywords the grammar cannot express (pattern, minimum, ...) are dropped. Notes
 * from node-llama-cpp: every listed property is generated (so optional ones are produced too, which still
 * matches the schema), and properties come in the order they are declared.
 */
import type { FunctionTool } from '../types.js';

type Json = Record<string, unknown>;
const BASIC = new Set(['string', 'number', 'integer', 'boolean', 'null']);

function isObj(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Converts a JSON Schema to node-llama-cpp's GbnfJsonSchema subset (returned untyped; the caller casts). */
export function toGbnfSchema(schema: unknown, depth = 0): Json {
  if (depth > 32) return { type: ['string', 'number', 'boolean', 'null'] };
  if (schema === true || schema === undefined || (isObj(schema) && Object.keys(schema).length === 0)) return ANY;
  if (!isObj(schema)) return ANY;
  const out: Json = {};
  if (typeof schema.description === 'string') out.description = schema.description;
  const defs = (schema.$defs ?? schema.definitions) as Json | undefined;
  if (isObj(defs) && depth === 0) {
    const d: Json = {};
    for (const [k, v] of Object.entries(defs)) d[k] = toGbnfSchema(v, depth + 1);
    out.$defs = d;
  }
  if (typeof schema.$ref === 'string') {
    const ref = schema.$ref.replace('#/definitions/', '#/$defs/');
    return { ...out, $ref: ref };
  }
  if ('const' in schema) return { ...out, const: schema.const };
  if (Array.isArray(schema.enum)) return { ...out, enum: schema.enum };
  const alts = (schema.oneOf ?? schema.anyOf) as unknown[] | undefined;
  if (Array.isArray(alts)) return { ...out, oneOf: alts.map((a) => toGbnfSchema(a, depth + 1)) };
  if (Array.isArray(schema.allOf) && schema.allOf.length === 1) return { ...out, ...toGbnfSchema(schema.allOf[0], depth + 1) };

  let type = schema.type;
  if (type === undefined) {
    if (isObj(schema.properties)) type = 'object';
    else if (schema.items !== undefined || schema.prefixItems !== undefined) type = 'array';
    else return { ...out, ...ANY };
  }
  if (Array.isArray(type)) {
    const types = type.filter((t): t is string => typeof t === 'string');
    if (types.every((t) => BASIC.has(t))) return { ...out, type: types };
    return { ...out, oneOf: types.map((t) => toGbnfSchema({ ...schema, type: t, description: undefined }, depth + 1)) };
  }
  switch (type) {
    case 'string': {
      const r: Json = { ...out, type: 'string' };
      if (schema.format === 'date-time' || schema.format === 'date' || schema.format === 'time') r.format = schema.format;
      else {
        if (typeof schema.minLength === 'number') r.minLength = schema.minLength;
        if (typeof schema.maxLength === 'number') r.maxLength = schema.maxLength;
      }
      return r;
    }
    case 'number':
    case 'integer':
    case 'boolean':
    case 'null':
      return { ...out, type };
    case 'array': {
      const r: Json = { ...out, type: 'array' };
      if (Array.isArray(schema.prefixItems)) r.prefixItems = schema.prefixItems.map((s) => toGbnfSchema(s, depth + 1));
      if (schema.items !== undefined && schema.items !== false) r.items = toGbnfSchema(schema.items, depth + 1);
      if (typeof schema.minItems === 'number') r.minItems = schema.minItems;
      if (typeof schema.maxItems === 'number') r.maxItems = schema.maxItems;
      return r;
    }
    case 'object': {
      const r: Json = { ...out, type: 'object' };
      const props = isObj(schema.properties) ? schema.properties : undefined;
      if (props && Object.keys(props).length > 0) {
        const p: Json = {};
        for (const [k, v] of Object.entries(props)) p[k] = toGbnfSchema(v, depth + 1);
        r.properties = p;
        if (schema.additionalProperties !== undefined && schema.additionalProperties !== false) {
          r.additionalProperties = schema.additionalProperties === true ? true : toGbnfSchema(schema.additionalProperties, depth + 1);
        }
      } else {
        r.additionalProperties = isObj(schema.additionalProperties) ? toGbnfSchema(schema.additionalProperties, depth + 1) : schema.additionalProperties === false ? false : true;
      }
      return r;
    }
    default:
      return { ...out, ...ANY };
  }
}

const ANY: Json = { type: ['string', 'number', 'boolean', 'null'] };

/** Parameters schema of a tool as a grammar schema (no parameters -> an empty object). */
export function toolParamsSchema(tool: FunctionTool): Json {
  if (!tool.parameters || Object.keys(tool.parameters).length === 0) return { type: 'object', properties: {} };
  const s = toGbnfSchema(tool.parameters);
  return s;
}

/**
 * Grammar schema of a forced tool call: `{"name": <tool>, "arguments": {...}}`, or an array of those when several
 * calls are allowed. "name" comes first so a streaming parser knows the tool before the arguments start.
 */
export function forcedCallSchema(tools: FunctionTool[], parallel: boolean): Json {
  const alts = tools.map((t) => ({
    type: 'object',
    properties: { name: { const: t.name }, arguments: toolParamsSchema(t) },
  }));
  const [only] = alts;
  const one = alts.length === 1 && only ? only : { oneOf: alts };
  return parallel ? { type: 'array', items: one, minItems: 1 } : one;
}

/** The instructions appended to the system text when a call is forced (or tools are offered beside a format grammar). */
export function describeToolsForProtocol(tools: FunctionTool[], parallel: boolean, forced: boolean): string {
  const list = tools.map((t) => JSON.stringify({ name: t.name, description: t.description ?? '', parameters: t.parameters ?? {} })).join('\n');
  const shape = parallel
    ? 'a JSON array of calls, each {"name": <tool name>, "arguments": <arguments object>}'
    : 'a single JSON object {"name": <tool name>, "arguments": <arguments object>}';
  return forced
    ? `You must call a tool now. Available tools:\n${list}\nAnswer only with ${shape}.`
    : `Available tools (not callable in this answer, which must follow the requested format):\n${list}`;
}
