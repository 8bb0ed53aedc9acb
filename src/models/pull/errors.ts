/**
 * Errors of `portico models pull|list|rm`. These are operator (command line) errors, not HTTP answers, so they
 * are not in src/platform/errors.ts; a route that starts pulls would map them (bad_ref -> 400, not_found -> 404,
 * unauthorized/forbidden -> 502 with the hub named, ...).
 */
export type PullErrorCode =
  /** the reference or an option is malformed (exit code 2) */
  | 'bad_ref'
  | 'bad_name'
  /** the hub has no such repository, revision or file */
  | 'not_found'
  /** the hub wants a token (gated or private repository) or refused the one given */
  | 'unauthorized'
  | 'forbidden'
  /** the repository has no GGUF file, or no file of the quantization asked for, or several */
  | 'no_gguf'
  | 'ambiguous'
  | 'split_unsupported'
  /** the bytes are not a GGUF (or ggml whisper) model */
  | 'not_a_model'
  /** size or SHA-256 differ from what the hub announced */
  | 'verification_failed'
  | 'disk_full'
  /** the models directory cannot be written (permissions, read-only, I/O error) */
  | 'disk_error'
  /** stopped (signal, network failure): the partial download is kept and the same command resumes it */
  | 'interrupted'
  /** the hub answered 5xx or could not be reached */
  | 'hub_error'
  | 'name_taken'
  /** another pull of the same file is running */
  | 'busy'
  /** models.json is unreadable or its lock could not be taken */
  | 'catalogue_error'
  | 'unknown_model';

export class PullError extends Error {
  constructor(
    readonly code: PullErrorCode,
    message: string,
    /** true when a partial download was kept and running the same pull again continues it */
    readonly resumable = false,
  ) {
    super(message);
    this.name = 'PullError';
  }
}
