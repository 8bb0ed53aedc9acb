/**
 * Pulled models as entries of the model registry: one per name (the model's own and each --name), all pointing
 * at the same file. The registry decides what wins when a YAML model has the same name.
 */
import type { PulledModel } from './catalogue.js';

export interface PulledModelSpec {
  /** the name clients send */
  name: string;
  /** the embedded engine that runs the file */
  provider: 'llama' | 'whisper' | 'piper';
  type: 'text' | 'embedding' | 'transcription' | 'speech';
  /** absolute path of the model file */
  path: string;
  /** the catalogue entry's own name (the same for its aliases) */
  model: string;
}

export function pulledModelSpecs(models: PulledModel[]): PulledModelSpec[] {
  return models.flatMap((m) =>
    [m.name, ...m.aliases].map((name) => ({
      name,
      provider: m.kind === 'transcription' ? ('whisper' as const) : m.kind === 'speech' ? ('piper' as const) : ('llama' as const),
      type: m.kind,
      path: m.path,
      model: m.name,
    })),
  );
}
