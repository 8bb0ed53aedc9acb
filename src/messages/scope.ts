/**
 * The inference-key scope of the Messages API's routes. Not `messages`: that word is a lower layer's own (the
 * engines' GenerateRequest field), and what a feature declares may not be a string of a lower layer
 * (test/architecture.test.ts).
 */
export const MESSAGES_SCOPE = 'anthropic-messages';
