/** The embeddings engine: moved to engines/shared/embeddings.ts when the azure-openai provider needed it too. */
export * from '../shared/embeddings.js';
