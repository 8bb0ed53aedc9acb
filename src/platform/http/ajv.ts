/**
 * The Ajv of route validation (./validation.ts), made the same way on the event loop and in the JSON worker
 * thread (./json-worker.ts), which validates a large body against its route's schema before it is sent back.
 */
import { Ajv, _, str, type CodeKeywordDefinition, type KeywordCxt } from 'ajv';
import addFormatsImport from 'ajv-formats';
import { codePoints } from '../code-points.js';

const addFormats = ((addFormatsImport as unknown as { default?: typeof addFormatsImport }).default ?? addFormatsImport) as unknown as (ajv: Ajv) => void;

/**
 * maxLength and minLength as Ajv defines them (code points, the same error), decided from the string's length
 * alone whenever it can be: a string has at most as many code points as UTF-16 units, and at least half as many.
 * Ajv's own keyword counts the code points of every string it checks, which for the largest accepted input (a
 * text of 10 Mi characters) is ~100 ms of the event loop; decided from `length`, it is nothing, and only a
 * string near a limit is counted.
 */
const lengthKeywords: CodeKeywordDefinition = {
  keyword: ['maxLength', 'minLength'],
  type: 'string',
  schemaType: 'number',
  $data: true,
  // where Ajv's own keyword runs (before pattern and format), so a string that breaks two rules gets the same error
  before: 'pattern',
  error: {
    message: ({ keyword, schemaCode }) => str`must NOT have ${keyword === 'maxLength' ? 'more' : 'fewer'} than ${schemaCode} characters`,
    params: ({ schemaCode }) => _`{limit: ${schemaCode}}`,
  },
  code(cxt: KeywordCxt) {
    const { keyword, data, schemaCode, gen } = cxt;
    const count = gen.scopeValue('func', { ref: codePoints });
    if (keyword === 'maxLength') cxt.fail$data(_`${data}.length > ${schemaCode} && ${count}(${data}) > ${schemaCode}`);
    else cxt.fail$data(_`${data}.length < ${schemaCode} || (${data}.length < 2 * ${schemaCode} && ${count}(${data}) < ${schemaCode})`);
  },
};

export function makeAjv(coerce: boolean): Ajv {
  const ajv = new Ajv({
    allErrors: false,
    coerceTypes: coerce ? 'array' : false,
    removeAdditional: false,
    useDefaults: true,
    strict: false,
    // errors carry the failing value and its schema (only on failure: no cost on valid requests)
    verbose: true,
  });
  addFormats(ajv);
  ajv.removeKeyword('maxLength');
  ajv.removeKeyword('minLength');
  ajv.addKeyword(lengthKeywords);
  return ajv;
}
