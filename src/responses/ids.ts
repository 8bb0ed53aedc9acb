import { randomBytes } from 'node:crypto';

/** Identifiers in OpenAI's style: a type prefix and random hex. */
export const newId = (prefix: 'resp' | 'msg' | 'fc' | 'fco' | 'rs' | 'call', bytes = 16) => `${prefix}_${randomBytes(bytes).toString('hex')}`;
