/**
 * The change feed's subscription (src/platform/cluster/feed.ts): `subscribe` settles only once the subscription is
 * in place, so a reader that reads its state after it misses nothing published since (the stored models read at
 * start: issue 25), and the resync handlers run when the subscription is first in place too, not only after a
 * reconnection. On Redis and on PostgreSQL LISTEN/NOTIFY, each with a name of the test's own.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import pino from 'pino';
import { createFeed, type ChangeFeed } from '../../src/platform/cluster/feed.js';
import { TEST_PG_URL, testRedisPrefix, testRedisUrl } from '../helpers/services.js';
import { waitFor } from '../helpers/wait.js';

const log = pino({ level: 'silent' });
const pgOff = process.env.PORTICO_TEST_PG === 'off';

/** one Redis prefix per name (pub/sub leaves no keys behind to remove) */
const prefixes = new Map<string, string>();
const prefixOf = (name: string) => prefixes.get(name) ?? prefixes.set(name, testRedisPrefix('feed')).get(name)!;

const kinds: Array<{ kind: string; skip?: string | false; make: (name: string) => ChangeFeed }> = [
  { kind: 'redis', make: (name) => createFeed({ redisUrl: testRedisUrl(), redisPrefix: prefixOf(name), log }) },
  { kind: 'postgres', skip: pgOff && 'PORTICO_TEST_PG=off', make: (name) => createFeed({ databaseUrl: TEST_PG_URL, installation: `feed${name}`, log }) },
];

for (const { kind, skip, make } of kinds) {
  describe(`the ${kind} feed`, { skip }, () => {
    test('a message published right after subscribe() settles is heard, on a new connection each time', async () => {
      const name = randomBytes(5).toString('hex');
      const publisher = make(name);
      const feeds: ChangeFeed[] = [];
      try {
        // each round is a fresh subscriber whose connection is still being made when it subscribes
        for (let i = 0; i < 8; i++) {
          const feed = make(name);
          feeds.push(feed);
          const heard: unknown[] = [];
          await feed.subscribe('probe', (m) => heard.push(m.n));
          await publisher.publish('probe', { n: i });
          await waitFor(() => heard.includes(i), { what: `message ${i} on a subscription that said it was in place`, timeoutMs: 5_000 });
        }
        // a second channel on a connection that is already subscribed: settled once it is subscribed too
        const feed = feeds.at(-1)!;
        const other: unknown[] = [];
        await feed.subscribe('second', (m) => other.push(m.n));
        await publisher.publish('second', { n: 'x' });
        await waitFor(() => other.includes('x'), { what: 'the message on the second channel', timeoutMs: 5_000 });
        // and a channel subscribed twice settles at once for the second handler, both hearing
        const again: unknown[] = [];
        await feed.subscribe('second', (m) => again.push(m.n));
        await publisher.publish('second', { n: 'y' });
        await waitFor(() => again.includes('y') && other.includes('y'), { what: 'both handlers of one channel', timeoutMs: 5_000 });
      } finally {
        await Promise.all([publisher, ...feeds].map((f) => f.close()));
      }
    });

    test('channels subscribed together on a connection in place are each heard, with no warning from the driver', async () => {
      const name = randomBytes(5).toString('hex');
      const publisher = make(name);
      const feed = make(name);
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
      process.on('warning', onWarning);
      try {
        await feed.subscribe('first', () => {});
        // several modules subscribe in one turn at start (admin's cluster health: three channels at once): on
        // PostgreSQL each is a LISTEN on the one listening connection, sent one after the other
        const heard = new Map<string, unknown[]>();
        const channels = ['alpha', 'beta', 'gamma', 'delta'];
        await Promise.all(channels.map((ch) => feed.subscribe(ch, (m) => (heard.get(ch) ?? heard.set(ch, []).get(ch)!).push(m.n))));
        for (const ch of channels) await publisher.publish(ch, { n: ch });
        await waitFor(() => channels.every((ch) => heard.get(ch)?.includes(ch)), { what: 'a message on each channel', timeoutMs: 5_000 });
        // warnings are emitted on the next tick
        await new Promise((r) => setImmediate(r));
        assert.deepEqual(warnings, []);
      } finally {
        process.off('warning', onWarning);
        await Promise.all([publisher, feed].map((f) => f.close()));
      }
    });

    test('the resync handlers run once the first subscription is in place', async () => {
      const feed = make(randomBytes(5).toString('hex'));
      try {
        let resyncs = 0;
        feed.onResync(() => resyncs++);
        await feed.subscribe('probe', () => {});
        await waitFor(() => resyncs === 1, { what: 'the first resync', timeoutMs: 5_000 });
      } finally {
        await feed.close();
      }
    });
  });
}
