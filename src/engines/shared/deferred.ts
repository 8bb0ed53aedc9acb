import type { GenerateEvent } from '../types.js';

/**
 * A generation whose request is built when it is first read: a parameter the provider refuses is an EngineError
 * of that first read, as an upstream's refusal would be, never a throw of generate() itself.
 */
export function deferred(make: () => AsyncIterable<GenerateEvent>): AsyncIterable<GenerateEvent> {
  let it: AsyncIterator<GenerateEvent> | undefined;
  const iterator: AsyncIterableIterator<GenerateEvent> = {
    [Symbol.asyncIterator]: () => iterator,
    next() {
      try {
        it ??= make()[Symbol.asyncIterator]();
      } catch (e) {
        return Promise.reject(e);
      }
      return it.next();
    },
    return() {
      const r = it?.return?.();
      return r ?? Promise.resolve({ value: undefined, done: true });
    },
  };
  return iterator;
}
