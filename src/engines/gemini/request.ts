/**
 * GenerateRequest -> the body of Gemini's generateContent / streamGenerateContent (the Gemini API, v1beta).
 *
 * Shapes from @google/genai's types (GenerateContentParameters, Content, Part, FunctionDeclaration, ToolConfig,
 * GenerationConfig). What Gemini cannot do is refused here, before any call, with a 400 `unsupported_parameter`
 * that names it (never dropped without a word): a participant `name`, an image that is neither a base64 data: URL
 * nor an http(s) URL whose type its extension tells, images of mixed detail, non-text system messages, images in a
 * tool's output.
 */
import { EngineError, type ChatContentPart, type ChatMessage, type GenerateRequest } from '../types.js';
import { toolArgsObject } from '../shared/tool-args.js';

/** reasoning effort -> thinkingBudget in tokens (LiteLLM's figures; `none` turns thinking off: budget 0) */
export const THINKING_BUDGET: Readonly<Record<string, number>> = { minimal: 128, low: 1024, medium: 2048, high: 4096, xhigh: 8192 };

const unsupported = (message: string) => new EngineError(message, 'unsupported_parameter', 400);
const invalid = (message: string) => new EngineError(message, 'invalid_value', 400);

/** data:<media type>;base64,<data> */
const DATA_URL = /^data:([a-z]+\/[a-z0-9.+-]+);base64,(.*)$/is;

/** the image types Gemini reads (its vision guide), by an http URL's extension: fileData needs a mime type */
const BY_EXTENSION: Readonly<Record<string, string>> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
};

type Part = Record<string, unknown>;

/**
 * The thought signatures of the calls Gemini made (thinking models put one on a functionCall part and want it back
 * with the call in the next request): `of` gives the one kept for a call id. `sentinel`: a call whose signature is
 * not known gets Google's documented placeholder (skip_thought_signature_validator), for the models that refuse a
 * call without one (Gemini 3 and later).
 */
export interface Signatures {
  of?(callId: string): string | undefined;
  sentinel?: boolean;
}

/** https://ai.google.dev/gemini-api/docs/thought-signatures (FAQ): what to send when the real signature is not known */
export const SKIP_SIGNATURE = 'skip_thought_signature_validator';
export interface GeminiContent {
  role: 'user' | 'model';
  parts: Part[];
}

function imagePart(p: Extract<ChatContentPart, { type: 'image_url' }>, at: string): Part {
  const m = DATA_URL.exec(p.url);
  if (m) return { inlineData: { mimeType: m[1]!.toLowerCase(), data: m[2] } };
  if (/^https?:\/\//i.test(p.url)) {
    const ext = /\.([a-z0-9]+)(?:[?#].*)?$/i.exec(new URL(p.url).pathname)?.[1]?.toLowerCase();
    const mimeType = ext ? BY_EXTENSION[ext] : undefined;
    if (!mimeType) {
      throw unsupported(
        `${at}: this model reads an image URL only when its extension tells its type (${Object.keys(BY_EXTENSION).join(', ')}); send the image as a base64 data: URL.`,
      );
    }
    return { fileData: { mimeType, fileUri: p.url } };
  }
  throw unsupported(`${at}: this model reads images given as a data: URL (base64) or an http(s) URL only.`);
}

function parts(content: ChatMessage['content'], at: string): Part[] {
  if (typeof content === 'string') return content ? [{ text: content }] : [];
  const out: Part[] = [];
  content.forEach((p, i) => {
    if (p.type === 'text') {
      if (p.text) out.push({ text: p.text });
    } else out.push(imagePart(p, `${at}.content[${i}]`));
  });
  return out;
}

function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  return content.map((p) => (p.type === 'text' ? p.text : '')).join('');
}

const argsOf = (args: string, at: string) => toolArgsObject(args, at, "Gemini keeps a call's args as an object");

/**
 * The conversation as Gemini's `systemInstruction` and `contents`: system and developer messages make the
 * instruction (in order); assistant turns are role `model`, their tool calls functionCall parts; a tool's output
 * is a functionResponse part of a user turn, named after the call it answers (Gemini matches them by name and
 * order: it has no call ids); turns of one role are merged (Gemini alternates user and model).
 */
export function geminiContents(messages: readonly ChatMessage[], sig: Signatures = {}): { system: string[]; contents: GeminiContent[] } {
  const system: string[] = [];
  const contents: GeminiContent[] = [];
  const names = new Map<string, string>();
  const push = (role: 'user' | 'model', p: Part[]) => {
    if (p.length === 0) return;
    const last = contents[contents.length - 1];
    if (last?.role === role) last.parts.push(...p);
    else contents.push({ role, parts: p });
  };
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (m.name !== undefined && m.role !== 'tool') throw unsupported(`${at}.name: a participant name is not supported by this model (Gemini's contents have none).`);
    switch (m.role) {
      case 'system':
      case 'developer': {
        if (typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text')) throw unsupported(`${at}: this model takes text only in system and developer messages.`);
        const t = textOf(m.content);
        if (t) system.push(t);
        break;
      }
      case 'user':
        push('user', parts(m.content, at));
        break;
      case 'assistant': {
        // reasoning is not sent back: Gemini's thoughts are its own (their signatures are not kept)
        const p = parts(m.content, at);
        m.toolCalls?.forEach((c, j) => {
          names.set(c.callId, c.name);
          const part: Part = { functionCall: { name: c.name, args: argsOf(c.arguments, `${at}.tool_calls[${j}]`) } };
          // the call's thought signature, given back as Gemini gave it (Gemini 3 refuses a call without it); one
          // unknown (another Portico, an old conversation) is the documented sentinel, on the turn's first call only
          const known = sig.of?.(c.callId);
          if (known !== undefined) part.thoughtSignature = known;
          else if (j === 0 && sig.sentinel) part.thoughtSignature = SKIP_SIGNATURE;
          p.push(part);
        });
        push('model', p);
        break;
      }
      case 'tool': {
        const name = names.get(m.toolCallId ?? '');
        if (name === undefined) {
          throw invalid(
            `${at}: the tool output answers the call '${m.toolCallId ?? ''}', which no earlier assistant message made (Gemini names a function's response after its call).`,
          );
        }
        if (typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text')) throw unsupported(`${at}: this model takes text only in a tool's output.`);
        push('user', [{ functionResponse: { name, response: { output: textOf(m.content) } } }]);
        break;
      }
    }
  });
  return { system, contents };
}

/** the path of a model under the API root: a `models/` prefix the operator wrote is not doubled */
export function modelPath(model: string): string {
  return '/models/' + encodeURIComponent(model.replace(/^models\//, ''));
}

export function buildGenerateBody(req: GenerateRequest, sig: Signatures = {}): Record<string, unknown> {
  const { system, contents } = geminiContents(req.messages, sig);
  const body: Record<string, unknown> = { contents };
  if (system.length) body.systemInstruction = { parts: [{ text: system.join('\n\n') }] };

  const gc: Record<string, unknown> = {};
  // Gemini sets the resolution of images for a whole request: one detail for all of them, or none
  const details = new Set<string>();
  for (const m of req.messages) if (typeof m.content !== 'string') for (const p of m.content) if (p.type === 'image_url') details.add(p.detail ?? 'auto');
  if (details.size > 1 && details.has('low'))
    throw unsupported("image 'detail': this model reads every image of a request at one resolution; send 'low' for all of them or for none.");
  if (details.has('low')) gc.mediaResolution = 'MEDIA_RESOLUTION_LOW';
  else if (details.has('high')) gc.mediaResolution = 'MEDIA_RESOLUTION_HIGH';

  if (req.temperature !== undefined) gc.temperature = req.temperature;
  if (req.topP !== undefined) gc.topP = req.topP;
  if (req.maxOutputTokens !== undefined) gc.maxOutputTokens = req.maxOutputTokens;
  if (req.stop?.length) gc.stopSequences = req.stop;
  if (req.presencePenalty !== undefined) gc.presencePenalty = req.presencePenalty;
  if (req.frequencyPenalty !== undefined) gc.frequencyPenalty = req.frequencyPenalty;
  if (req.seed !== undefined) gc.seed = req.seed;

  const effort = req.reasoningEffort;
  if (effort === 'none') gc.thinkingConfig = { thinkingBudget: 0 };
  else if (effort !== undefined) {
    const budget = req.reasoningBudget ?? THINKING_BUDGET[effort];
    if (budget === undefined) throw unsupported(`reasoning effort '${effort}' is not supported by this model; use one of ${Object.keys(THINKING_BUDGET).join(', ')} or none.`);
    gc.thinkingConfig = { thinkingBudget: budget, includeThoughts: true };
  }

  const f = req.format;
  if (f?.type === 'json_object') gc.responseMimeType = 'application/json';
  else if (f?.type === 'json_schema') {
    gc.responseMimeType = 'application/json';
    gc.responseJsonSchema = f.schema;
  }
  if (Object.keys(gc).length) body.generationConfig = gc;

  if (req.tools?.length) {
    body.tools = [
      {
        functionDeclarations: req.tools.map((t) => {
          const d: Record<string, unknown> = { name: t.name };
          if (t.description !== undefined) d.description = t.description;
          // the JSON schema as it is: Gemini reads JSON Schema itself there (no conversion to its OpenAPI subset)
          if (t.parameters !== undefined) d.parametersJsonSchema = t.parameters;
          return d;
        }),
      },
    ];
    const tc = req.toolChoice;
    if (tc !== undefined) {
      const fc: Record<string, unknown> =
        tc === 'auto' ? { mode: 'AUTO' } : tc === 'none' ? { mode: 'NONE' } : tc === 'required' ? { mode: 'ANY' } : { mode: 'ANY', allowedFunctionNames: [tc.name] };
      body.toolConfig = { functionCallingConfig: fc };
    }
  } else if (typeof req.toolChoice === 'object') {
    throw invalid(`'tool_choice' names the function '${req.toolChoice.name}', but the request has no tools.`);
  }
  return body;
}
