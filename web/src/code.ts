/**
 * The playground's request as code a person can run: curl, Python and JavaScript with OpenAI's official SDKs
 * (`openai` on PyPI and npm) pointed at this Portico. The key is read from PORTICO_API_KEY, never written out.
 */
import type { Static } from 'typebox';
import type { CreateResponseBody } from '../../src/responses/schemas.js';

export type CodeLanguage = 'curl' | 'python' | 'javascript';
export const CODE_LANGUAGES: CodeLanguage[] = ['curl', 'python', 'javascript'];

/**
 * The body of POST /v1/responses the playground sends (and the code shows): the server's own schema's fields
 * (a field renamed there fails the build), its input narrowed to the messages of a conversation.
 */
export type ResponsesBody = Pick<Static<typeof CreateResponseBody>, 'model' | 'instructions' | 'temperature' | 'max_output_tokens'> & {
  input: Array<{ role: 'user' | 'assistant'; content: string }>;
  stream: true;
};

const indent = (s: string, by: string) => s.split('\n').join(`\n${by}`);

/** A JSON value as a Python literal (the body holds strings, numbers, booleans, lists and objects only). */
function py(v: unknown, pad = ''): string {
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (v === null || v === undefined) return 'None';
  if (Array.isArray(v)) return v.length === 0 ? '[]' : `[\n${v.map((x) => `${pad}    ${py(x, pad + '    ')},`).join('\n')}\n${pad}]`;
  if (typeof v === 'object')
    return `{${Object.entries(v as Record<string, unknown>)
      .map(([k, x]) => `${JSON.stringify(k)}: ${py(x, pad)}`)
      .join(', ')}}`;
  return JSON.stringify(v);
}

export function requestCode(lang: CodeLanguage, baseUrl: string, body: ResponsesBody): string {
  const api = `${baseUrl}/v1`;
  if (lang === 'curl') {
    // the body in single quotes for the shell: a quote inside it is closed, escaped and opened again
    const json = JSON.stringify(body, null, 2).replace(/'/g, `'\\''`);
    return `curl ${api}/responses \\\n  -H "Authorization: Bearer $PORTICO_API_KEY" \\\n  -H "Content-Type: application/json" \\\n  -N -d '${json}'`;
  }
  const fields = Object.entries(body).filter(([k]) => k !== 'stream');
  if (lang === 'python') {
    const args = fields.map(([k, v]) => `    ${k}=${py(v, '    ')},`).join('\n');
    return [
      'import os',
      'from openai import OpenAI',
      '',
      `client = OpenAI(base_url=${JSON.stringify(api)}, api_key=os.environ["PORTICO_API_KEY"])`,
      '',
      'stream = client.responses.create(',
      args,
      '    stream=True,',
      ')',
      'for event in stream:',
      '    if event.type == "response.output_text.delta":',
      '        print(event.delta, end="", flush=True)',
      'print()',
    ].join('\n');
  }
  const args = fields.map(([k, v]) => `  ${k}: ${indent(JSON.stringify(v, null, 2), '  ')},`).join('\n');
  return [
    'import OpenAI from "openai";',
    '',
    `const client = new OpenAI({ baseURL: ${JSON.stringify(api)}, apiKey: process.env.PORTICO_API_KEY });`,
    '',
    'const stream = await client.responses.create({',
    args,
    '  stream: true,',
    '});',
    'for await (const event of stream) {',
    '  if (event.type === "response.output_text.delta") process.stdout.write(event.delta);',
    '}',
    'process.stdout.write("\\n");',
  ].join('\n');
}
