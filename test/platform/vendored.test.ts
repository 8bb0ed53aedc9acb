/**
 * scripts/build.mjs bundles the CommonJS packages every process loads into dist/vendor/ (each test file is a process
 * of its own, and ~300 small files cost ~0.2 s of CPU to load: docs/performance.md, "The test suite"). Importing the
 * application must load none of their files from node_modules: such a file would be a second copy beside the bundle
 * (two Ajv code generators, two ws, two registries), and the cost the bundles took away.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const BUNDLED =
  /\/node_modules\/(fastify|semver|avvio|find-my-way|ajv|ajv-formats|fast-json-stringify|prom-client|ws|@opentelemetry\/api|@fastify\/(multipart|websocket|cors|helmet|fast-json-stringify-compiler))\//;

test('the application loads Fastify, Ajv, prom-client, ws and OpenTelemetry from its bundles, never from node_modules', async () => {
  await import('../helpers/app.js');
  const loaded = Object.keys(createRequire(import.meta.url).cache);
  assert.ok(
    loaded.some((f) => f.includes('/node_modules/pino/')),
    'the require cache is the one the application used',
  );
  assert.deepEqual(
    loaded.filter((f) => BUNDLED.test(f)),
    [],
  );
});
