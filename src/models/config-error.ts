/** A model file (or a stored model) that cannot be used, said in one line (a module of its own: the CLI recognizes it without loading the model file's checks). */
export class ModelConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelConfigError';
  }
}
