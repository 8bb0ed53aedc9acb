export { createLlamaEngine, LlamaEngine, type LlamaEngineOptions } from './engine.js';
