/** GenerateRequest <-> Chat Completions: moved to engines/shared/chat.ts when the azure-openai provider needed it too. */
export * from '../shared/chat.js';
