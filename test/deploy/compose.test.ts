/**
 * compose.yaml, read as Compose reads it (YAML with merge keys): PostgreSQL, Redis, two Portico instances with the
 * settings several instances must share (one database, one Redis, the same pepper and JWT secret, given by the
 * operator, never written in the file), each its own data volume, health checks everywhere, and one published port:
 * the proxy's, whose configuration (deploy/haproxy.cfg) names both instances and checks /readyz. The published
 * images cannot be pulled here; test/deploy/container.test.ts runs the image and that proxy configuration.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { packageRoot } from '../../src/platform/paths.js';

const ROOT = packageRoot();
const compose = parse(readFileSync(join(ROOT, 'compose.yaml'), 'utf8'), { merge: true }) as any;
const haproxy = readFileSync(join(ROOT, 'deploy/haproxy.cfg'), 'utf8');
const services = compose.services as Record<string, any>;
const instances = Object.keys(services).filter((n) => /^portico-\d+$/.test(n));
/** what every instance of one installation must have alike (docs/deployment.md, "A multi-instance set-up") */
const SHARED = ['DATABASE_URL', 'REDIS_URL', 'KEY_PEPPER', 'JWT_SECRET', 'PUBLIC_URL', 'TRUST_PROXY'];

describe('compose.yaml', () => {
  test('PostgreSQL, Redis, two Portico instances built from the Dockerfile, and a proxy', () => {
    assert.deepEqual(instances, ['portico-1', 'portico-2']);
    assert.match(services.postgres.image, /^postgres:(1[3-9]|[2-9]\d)\b/);
    assert.match(services.redis.image, /^redis:([7-9]|\d\d)\b/);
    for (const n of instances) {
      assert.equal(services[n].build, '.', n);
      assert.equal(services[n].image, services[instances[0]!].image, `${n} runs another image`);
    }
    assert.ok(services.proxy, 'no proxy service');
  });

  test('the instances share the database, Redis, pepper and JWT secret; the secrets come from the operator', () => {
    const envs = instances.map((n) => services[n].environment as Record<string, string>);
    for (const k of SHARED) {
      assert.ok(envs[0]![k], `${k} is not set`);
      for (const e of envs) assert.equal(e[k], envs[0]![k], `${k} differs between instances`);
    }
    const env = envs[0]!;
    assert.match(env.DATABASE_URL!, /^postgres:\/\/[^@]+@postgres:5432\/portico$/);
    assert.match(env.REDIS_URL!, /^redis:\/\/redis:6379\/\d+$/);
    // required variables (Compose stops with the message when one is missing), never a value in the file
    for (const k of ['KEY_PEPPER', 'JWT_SECRET']) assert.match(env[k]!, new RegExp(`^\\$\\{${k}:\\?[^}]+\\}$`), k);
    assert.match(env.DATABASE_URL!, /\$\{POSTGRES_PASSWORD:\?[^}]+\}/);
    assert.equal(services.postgres.environment.POSTGRES_PASSWORD, env.DATABASE_URL!.match(/(\$\{POSTGRES_PASSWORD:\?[^}]+\})/)![1]);
    // Redis as docs/deployment.md asks: keys never evicted (BullMQ)
    assert.ok(services.redis.command.join(' ').includes('--maxmemory-policy noeviction'));
  });

  test('each instance keeps its own data volume; pulled models are one shared volume', () => {
    const dataVolumes = instances.map((n) => (services[n].volumes as string[]).find((v) => v.endsWith(':/data')));
    assert.ok(dataVolumes.every(Boolean), JSON.stringify(dataVolumes));
    assert.equal(new Set(dataVolumes).size, instances.length, 'two instances share a DATA_DIR');
    for (const n of instances) assert.ok((services[n].volumes as string[]).includes('models:/data/models'), n);
    for (const v of [...dataVolumes.map((d) => d!.split(':')[0]!), 'models', 'postgres', 'redis']) assert.ok(v in compose.volumes, `volume ${v} is not declared`);
  });

  test('health checks: the database and Redis before the instances, /readyz before the proxy', () => {
    assert.ok(services.postgres.healthcheck.test.includes('pg_isready'));
    assert.ok(services.redis.healthcheck.test.join(' ').includes('redis-cli ping'));
    for (const n of instances) {
      assert.match(services[n].healthcheck.test.join(' '), /127\.0\.0\.1:8080\/readyz/, n);
      assert.equal(services[n].depends_on.postgres.condition, 'service_healthy');
      assert.equal(services[n].depends_on.redis.condition, 'service_healthy');
      // longer than SHUTDOWN_GRACE_MS (10 s) + 5 s: Portico stops on its own before it is killed
      assert.ok(parseInt(services[n].stop_grace_period, 10) >= 17, n);
    }
    for (const n of instances) assert.equal(services.proxy.depends_on[n].condition, 'service_healthy');
  });

  test('one published port, the proxy`s; its configuration balances both instances and checks /readyz', () => {
    const published = Object.entries(services).filter(([, s]) => s.ports?.length);
    assert.deepEqual(
      published.map(([n]) => n),
      ['proxy'],
    );
    assert.match(services.proxy.ports[0], /:8080$/);
    assert.ok((services.proxy.volumes as string[]).includes('./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro'));
    assert.match(haproxy, /^\s*bind :8080$/m);
    for (const n of instances) assert.match(haproxy, new RegExp(`^\\s*server ${n} ${n}:8080\\b`, 'm'));
    assert.match(haproxy, /option httpchk GET \/readyz/);
    assert.match(haproxy, /option forwardfor/);
    // WebSockets of /v1/responses live up to WS_MAX_AGE_MS (60 minutes)
    assert.ok(Number(/timeout tunnel (\d+)m/.exec(haproxy)?.[1]) >= 60);
  });
});
