/**
 * The floor a Node gateway stands on, for benchmarks: the least a proxy in this process can do for one
 * `POST /v1/responses` on the same upstream. node:http server, undici Pool client (as Portico's), no
 * authentication, validation, routing, usage or logs:
 *   - stream false: the body parsed, a chat.completions body sent, the JSON answer parsed and a Response-shaped
 *     object written back;
 *   - stream true: a chat.completions body sent with stream true, the upstream's event stream relayed as it is
 *     (no parsing, no translation).
 * Portico's rows minus these rows is what Portico's own work costs on top of moving the bytes.
 *
 * `startFastifyFloorProxy` does the same in a bare Fastify 5 (no logger, no hooks, no schema: its router, its JSON
 * body parser, reply.send): the framework's own cost per request, between the Node proxy and Portico.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { Pool } from 'undici';

interface FloorProxy {
  url: string;
  close: () => Promise<void>;
}

type UpstreamAnswer = { choices: Array<{ message: { content: string } }>; usage: Record<string, number> };

/** the Response-shaped object both proxies write back for a non-streaming request */
function responseOf(id: number, model: string, j: UpstreamAnswer) {
  return {
    id: `resp_${id}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'completed',
    model,
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
  };
}

export async function startFastifyFloorProxy(upstreamUrl: string): Promise<FloorProxy> {
  const u = new URL(upstreamUrl);
  const pool = new Pool(u.origin, { connections: null, pipelining: 1 });
  const path = u.pathname.replace(/\/+$/, '') + '/chat/completions';
  let n = 0;
  const app = Fastify({ logger: false, keepAliveTimeout: 60_000 });
  app.post('/v1/responses', async (req, reply) => {
    const body = req.body as { model: string; input: string; stream?: boolean };
    const upstream = JSON.stringify({ model: body.model, messages: [{ role: 'user', content: body.input }], stream: body.stream === true });
    const r = await pool.request({ method: 'POST', path, headers: { 'content-type': 'application/json' }, body: upstream });
    if (body.stream) {
      reply.header('content-type', 'text/event-stream');
      return reply.send(r.body);
    }
    return responseOf(++n, body.model, (await r.body.json()) as UpstreamAnswer);
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    close: async () => {
      await app.close();
      await pool.close();
    },
  };
}

export async function startFloorProxy(upstreamUrl: string): Promise<FloorProxy> {
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
          const out = JSON.stringify(responseOf(++n, body.model, (await r.body.json()) as UpstreamAnswer));
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
