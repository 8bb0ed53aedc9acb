import { Ajv, type ErrorObject } from 'ajv';
import addFormatsImport from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

const addFormats = (addFormatsImport as any).default ?? addFormatsImport;

function makeAjv(coerce: boolean) {
  const ajv = new Ajv({
    allErrors: false,
    coerceTypes: coerce ? 'array' : false,
    removeAdditional: false,
    useDefaults: true,
    strict: false,
  });
  addFormats(ajv);
  return ajv;
}

// JSON bodies are taken as they are (a string is not a number); query strings and path parameters are text
// on the wire, so they are coerced.
const bodyAjv = makeAjv(false);
const paramAjv = makeAjv(true);

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : paramAjv;
  return ajv.compile(schema as object) as any;
};

/** One clear sentence and the parameter path from an Ajv error. */
export function describeValidationError(
  errors: ErrorObject[] | undefined,
  part: string | undefined,
): { message: string; param: string | null } {
  const e = errors?.[0];
  if (!e) return { message: 'invalid request', param: null };
  let path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (e.keyword === 'required') path = path ? `${path}.${(e.params as any).missingProperty}` : (e.params as any).missingProperty;
  if (e.keyword === 'additionalProperties') {
    const extra = (e.params as any).additionalProperty;
    const at = path ? `${path}.${extra}` : extra;
    return { message: `Unknown parameter: '${at}'.`, param: at };
  }
  const where = path || (part === 'body' ? 'body' : part ?? 'request');
  let msg = e.message ?? 'is invalid';
  if (e.keyword === 'required') msg = 'is required';
  if (e.keyword === 'enum') msg = `must be one of: ${((e.params as any).allowedValues as unknown[]).join(', ')}`;
  if (e.keyword === 'maxLength') msg = `must be at most ${(e.params as any).limit} characters`;
  if (e.keyword === 'minLength') msg = (e.params as any).limit === 1 ? 'must not be empty' : `must be at least ${(e.params as any).limit} characters`;
  if (e.keyword === 'maxItems') msg = `must have at most ${(e.params as any).limit} items`;
  return { message: `${where} ${msg}`, param: path || null };
}
