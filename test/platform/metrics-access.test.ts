// /metrics is not public on the API port by default: loopback only unless METRICS_TOKEN (a bearer token) or
// METRICS_PORT (a port of its own, and then nothing on the API port) says otherwise.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp } from '../helpers/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { startServer } from '../../src/compose/serve.js';

test('default: answered to this machine (127.0.0.1, ::1), 403 with what to set to anyone else', async () => {
  const t = await buildTestApp();
  try {
    for (const remoteAddress of ['127.0.0.1', '::1', '::ffff:127.0.0.1']) {
      const r = await t.app.inject({ method: 'GET', url: '/metrics', remoteAddress });
      assert.equal(r.statusCode, 200, remoteAddress);
      assert.match(r.body, /portico_http_requests_total/);
    }
    for (const remoteAddress of ['10.1.2.3', '192.168.0.7', '::ffff:10.0.0.1', '2001:db8::1']) {
      const r = await t.app.inject({ method: 'GET', url: '/metrics', remoteAddress });
      assert.equal(r.statusCode, 403, remoteAddress);
      assert.match(r.body, /METRICS_TOKEN or METRICS_PORT/);
      assert.doesNotMatch(r.body, /portico_http_requests_total/);
    }
  } finally {
    await t.close();
  }
});

test('METRICS_TOKEN: a bearer token from anywhere, and nothing without it (even from loopback)', async () => {
  const token = 'scrape-0123456789abcdef';
  const t = await buildTestApp({ env: { METRICS_TOKEN: token } });
  try {
    const cases: Array<[string | undefined, number]> = [
      [undefined, 401],
      ['Bearer wrong-0123456789abcdef', 401],
      [`Bearer ${token}x`, 401],
      [`Basic ${token}`, 401],
      [`Bearer ${token}`, 200],
      [`bearer ${token}`, 200],
    ];
    for (const [authorization, status] of cases) {
      const r = await t.app.inject({ method: 'GET', url: '/metrics', remoteAddress: '10.9.8.7', headers: authorization ? { authorization } : {} });
      assert.equal(r.statusCode, status, `${authorization}: ${r.body.slice(0, 200)}`);
      if (status === 200) assert.match(r.body, /portico_http_requests_total/);
      else assert.doesNotMatch(r.body, new RegExp(token));
    }
  } finally {
    await t.close();
  }
});

test('METRICS_PORT: served on its own port (with the token when set); the API port has no /metrics', async () => {
  const config = loadConfig({
    PORTICO_DB: 'memory',
    PORT: '0',
    HOST: '127.0.0.1',
    METRICS_PORT: '0',
    METRICS_TOKEN: 'scrape-0123456789abcdef',
    JWT_SECRET: 'x'.repeat(40),
    KEY_PEPPER: 'p'.repeat(40),
    LOG_LEVEL: 'silent',
    DATA_DIR: '/tmp/portico-metrics-port-test',
  });
  const s = await startServer(config, {});
  try {
    assert.ok(s.metricsUrl);
    const api = await fetch(`${s.url}/metrics`);
    assert.equal(api.status, 404);
    await api.arrayBuffer();
    const noToken = await fetch(s.metricsUrl!);
    assert.equal(noToken.status, 401);
    await noToken.arrayBuffer();
    const ok = await fetch(s.metricsUrl!, { headers: { authorization: 'Bearer scrape-0123456789abcdef' } });
    assert.equal(ok.status, 200);
    assert.match(await ok.text(), /portico_http_requests_total/);
    const other = await fetch(s.metricsUrl!.replace('/metrics', '/healthz'));
    assert.equal(other.status, 404);
    await other.arrayBuffer();
  } finally {
    await s.close();
  }
});

test('bad settings are refused at start with what is allowed', () => {
  assert.throws(() => loadConfig({ METRICS_TOKEN: 'short', DATA_DIR: '/tmp/portico-metrics-port-test' }), /METRICS_TOKEN must be at least 16 characters/);
  assert.throws(() => loadConfig({ METRICS_PORT: 'x', DATA_DIR: '/tmp/portico-metrics-port-test' }), /METRICS_PORT must be a whole number/);
});
