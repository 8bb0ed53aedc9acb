import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, testDatabases, type TestApp } from '../helpers/app.js';

for (const db of testDatabases()) {
  describe(`OpenAPI document and /docs (${db})`, () => {
    let t: TestApp;
    before(async () => {
      t = await buildTestApp({ db });
    });
    after(() => t.close());

    test('/openapi.json lists every portal route with its security', async () => {
      const res = await t.app.inject({ method: 'GET', url: '/openapi.json' });
      assert.equal(res.statusCode, 200);
      const doc = res.json();
      assert.match(doc.openapi, /^3\./);
      const want: Record<string, string[]> = {};
      for (const base of ['/v1/portal/management/api-keys', '/v1/portal/api-keys']) {
        want[base] = ['get', 'post'];
        want[`${base}/{api_key_id}`] = ['delete', 'put'];
        want[`${base}/revoke`] = ['post'];
        want[`${base}/restore`] = ['post'];
      }
      want['/v1/portal/query/usage'] = ['get'];
      want['/v1/portal/query/balance'] = ['get'];
      want['/v1/models'] = ['get'];
      want['/v1/portal/me'] = ['get'];
      want['/v1/portal/session'] = ['get', 'delete'];
      want['/v1/portal/session/link'] = ['post'];
      want['/v1/portal/session/methods'] = ['get'];
      for (const [path, methods] of Object.entries(want)) {
        assert.ok(doc.paths[path], `missing path ${path}`);
        for (const m of methods) assert.ok(doc.paths[path][m], `missing ${m.toUpperCase()} ${path}`);
      }
      for (const base of ['/v1/portal/management/api-keys', '/v1/portal/api-keys']) {
        assert.deepEqual(doc.paths[base].post.security, [{ portalJwt: [] }]);
        const body = doc.paths[base].post.requestBody.content['application/json'].schema;
        assert.deepEqual(Object.keys(body.properties).sort(), ['description', 'expires_at', 'name', 'org_id', 'scopes']);
        assert.deepEqual(body.required, ['name']);
        assert.equal(body.properties.name.maxLength, 100);
        assert.equal(body.properties.description.maxLength, 500);
        assert.equal(body.properties.scopes.maxItems, 10);
        assert.equal(body.properties.scopes.items.maxLength, 50);
        const q = doc.paths[base].get.parameters.map((p: any) => p.name).sort();
        assert.deepEqual(q, ['org_id', 'page', 'per_page', 'search', 'status']);
      }
      assert.deepEqual(doc.paths['/v1/models'].get.security, [{ apiKey: [] }]);
      // the query APIs take a Management API Key or a portal JWT (issue 26: they declared no security)
      for (const p of ['/v1/portal/query/usage', '/v1/portal/query/balance']) assert.deepEqual(doc.paths[p].get.security, [{ apiKey: [] }, { portalJwt: [] }], p);
      // every operation under /v1 says how it is authenticated, but the sign-in ones, which take no credentials
      const open = new Set(['/v1/portal/session', '/v1/portal/session/link', '/v1/portal/session/methods']);
      const unsecured = Object.entries<Record<string, any>>(doc.paths)
        .filter(([path]) => path.startsWith('/v1') && !open.has(path))
        .flatMap(([path, ops]) =>
          Object.entries<any>(ops)
            .filter(([, op]) => !op.security?.length)
            .map(([m]) => `${m.toUpperCase()} ${path}`),
        );
      assert.deepEqual(unsecured, []);
      // the usage report documents its rows (the page types them from the same schema), key names included
      const report = doc.paths['/v1/portal/query/usage'].get.responses['200'].content['application/json'].schema.properties.data;
      assert.deepEqual(Object.keys(report.properties).sort(), ['end_time', 'group_by', 'list', 'start_time', 'total']);
      for (const f of ['date', 'model', 'key_id', 'key_name', 'key_deleted', 'operation', 'requests', 'audio_seconds', 'output_audio_seconds', 'cost'])
        assert.ok(report.properties.list.items.properties[f], `usage row ${f}`);
      for (const f of ['audio_seconds', 'output_audio_seconds']) assert.equal(report.properties.total.properties[f].type, 'number', `usage total ${f}`);
      assert.match(doc.paths['/v1/portal/query/usage'].get.parameters.find((p: any) => p.name === 'group_by').description, /key_name/);
      assert.ok(doc.paths['/v1/portal/me'].get.responses['200'].content['application/json'].schema.properties.data.properties.models.items.properties.voices);
      // the page's own paths are not API
      for (const p of ['/', '/keys', '/assets/{file}', '/auth/oidc/login', '/auth/oidc/callback']) assert.equal(doc.paths[p], undefined, p);
      assert.ok(doc.components.securitySchemes.portalJwt);
      assert.ok(doc.components.securitySchemes.apiKey);
      // every operation declares its error shape: the envelope on the portal and the admin API, the OpenAI object under /v1
      for (const [path, ops] of Object.entries<Record<string, any>>(doc.paths)) {
        if (!path.startsWith('/v1')) continue;
        for (const [method, op] of Object.entries<any>(ops)) {
          for (const status of ['4XX', '5XX']) {
            const schema = op.responses?.[status]?.content?.['application/json']?.schema;
            assert.ok(schema, `${method.toUpperCase()} ${path} declares ${status}`);
            if (path.startsWith('/v1/portal') || path.startsWith('/v1/admin')) assert.deepEqual(Object.keys(schema.properties).sort(), ['data', 'meta'], `${path} ${status}`);
            // Anthropic's routes answer in Anthropic's shape (docs/api.md, "Anthropic Messages API")
            else if (path.startsWith('/v1/messages')) assert.deepEqual(Object.keys(schema.properties.error.properties).sort(), ['message', 'type'], `${path} ${status}`);
            else assert.deepEqual(Object.keys(schema.properties.error.properties).sort(), ['code', 'message', 'param', 'type'], `${path} ${status}`);
          }
        }
      }
      // the Responses and audio routes document what they answer (issue 8)
      const ok200 = (path: string, m: string) => doc.paths[path][m].responses['200'].content;
      const created = ok200('/v1/responses', 'post');
      assert.deepEqual(Object.keys(created).sort(), ['application/json', 'text/event-stream']);
      for (const f of ['id', 'object', 'status', 'model', 'output', 'usage', 'error', 'incomplete_details'])
        assert.ok(created['application/json'].schema.properties[f], `Response.${f}`);
      assert.ok(ok200('/v1/responses/{id}', 'get')['application/json'].schema.properties.output);
      assert.ok(ok200('/v1/responses/{id}/cancel', 'post')['application/json'].schema.properties.status);
      assert.ok(ok200('/v1/responses/{id}', 'delete')['application/json'].schema.properties.deleted);
      assert.ok(ok200('/v1/responses/{id}/input_items', 'get')['application/json'].schema.properties.has_more);
      assert.ok(ok200('/v1/responses/input_tokens', 'post')['application/json'].schema.properties.input_tokens);
      assert.ok(ok200('/v1/audio/speech', 'post')['audio/mpeg']);
      for (const p of ['/v1/audio/transcriptions', '/v1/audio/translations']) {
        assert.ok(ok200(p, 'post')['application/json'].schema.properties.segments, p);
        assert.ok(ok200(p, 'post')['text/vtt'], p);
      }
      // the Messages API: its bodies, its answers, and the key in x-api-key as well as bearer
      assert.ok(doc.paths['/v1/messages'].post.requestBody.content['application/json'].schema.properties.max_tokens);
      assert.ok(ok200('/v1/messages', 'post')['text/event-stream']);
      assert.ok(ok200('/v1/messages/count_tokens', 'post')['application/json'].schema.properties.input_tokens);
      assert.deepEqual(doc.paths['/v1/messages'].post.security, [{ apiKey: [] }, { xApiKey: [] }]);
      assert.deepEqual(doc.components.securitySchemes.xApiKey, {
        type: 'apiKey',
        in: 'header',
        name: 'x-api-key',
        description: doc.components.securitySchemes.xApiKey.description,
      });
      // the document itself is not listed
      assert.equal(doc.paths['/openapi.json'], undefined);
    });

    test('/docs answers 200 with an HTML page', async () => {
      let res = await t.app.inject({ method: 'GET', url: '/docs' });
      if (res.statusCode >= 300 && res.statusCode < 400)
        res = await t.app.inject({ method: 'GET', url: String(res.headers.location).startsWith('/') ? String(res.headers.location) : `/docs/${res.headers.location}` });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /text\/html/);
      assert.match(res.body, /swagger/i);
      // the reference shares the page's origin (and its session cookie): no framing, no sniffing, scripts of its own only
      for (const url of ['page', '/docs/static/swagger-ui-bundle.js', '/docs/json']) {
        const r = url === 'page' ? res : await t.app.inject({ method: 'GET', url });
        assert.equal(r.statusCode, 200, url);
        assert.equal(r.headers['x-frame-options'], 'DENY', url);
        assert.equal(r.headers['x-content-type-options'], 'nosniff', url);
        const csp = String(r.headers['content-security-policy']);
        assert.match(csp, /script-src 'self';/, url);
        assert.match(csp, /frame-ancestors 'none'/, url);
        assert.doesNotMatch(csp, /script-src[^;]*unsafe-inline/, url);
      }
      assert.equal((await t.app.inject({ method: 'GET', url: '/openapi.json' })).headers['x-content-type-options'], 'nosniff');
    });
  });
}
