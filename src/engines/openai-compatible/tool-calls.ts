/** Tool-call assembly: moved to engines/shared/tool-calls.ts when the azure-openai provider needed it too. */
export * from '../shared/tool-calls.js';
