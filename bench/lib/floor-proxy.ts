/**
 * The floor a Node gateway stands on, for benchmarks: the least a proxy in this process can do for one
 * `POST /v1/responses` on the same upstream. node:http server, undici Pool client (as Portico's), no
 * authentication, validation, routing, usage or logs:
 *   - stream false: the body parsed, a chat.completions body sent, the JSON answer parsed and a Response-shaped
 *     object written back;
 *   - stream true: a chat.completions body sent with stream true, the upstream's event stream relayed as it is
 *     (no parsing, no translation).
 * Portico's rows minus these rows is what Portico's own work costs on top of moving the bytes.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

export async function startFloorProxy(upstreamUrl: string): Promise<{ url: string; close: () => Promise<void> }> {
  const u = new URL(upstreamUrl);
  const pool = new Pool(u.origin, { connections: null, pipelining: 1 });
  const path = u.pathname.replace(/\/+$/, '') + '/chat/completions';
  let n = 0;
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as { model: string; input: string; stream?: boolean };
      const upstream = JSON.stringify({ model: body.model, messages: [{ role: 'user', content: body.input }], stream: body.stream === true });
      pool.request({ method: 'POST', path, headers: { 'content-type': 'application/json' }, body: upstream }).then(
        async (r) => {
          if (body.stream) {
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            for await (const c of r.body) res.write(c);
            res.end();
            return;
          }
          const j = (await r.body.json()) as { choices: Array<{ message: { content: string } }>; usage: Record<string, number> };
          const id = ++n;
          const out = JSON.stringify({
            id: `resp_${id}`,
            object: 'response',
            created_at: Math.floor(Date.now() / 1000),
            status: 'completed',
            model: body.model,
            output: [
              {
                type: 'message',
                id: `msg_${id}`,
                status: 'completed',
                role: 'assistant',
                content: [{ type: 'output_text', text: j.choices[0]!.message.content, annotations: [] }],
              },
            ],
            usage: j.usage,
          });
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
          res.end(out);
        },
        () => {
          res.writeHead(502);
          res.end();
        },
      );
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await pool.close();
    },
  };
}
