/** A refusal of what the operator asked, said in one line (the `portico` command exits 2). */
export class UsageError extends Error {}
