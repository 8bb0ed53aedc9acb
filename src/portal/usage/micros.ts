/** Credits as the ledger stores them: whole micro-credits (a module of its own: the CLI parses amounts without loading the ledger). */
export const MICROS = 1_000_000;
