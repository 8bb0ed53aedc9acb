// The cap on connections per client address (MAX_CONNECTIONS_PER_ADDRESS, issue 22 §1): one address cannot take the
// process's MAX_CONNECTIONS. A connection past the cap is closed at once; the connections already open keep working;
// a closed one gives its place back; an exempt address (a trusted proxy) is not counted.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setup, type Env } from '../responses/util.js';
import { capConnectionsPerAddress } from '../../src/platform/http/address-cap.js';

const CAP = 4;

/** A raw TCP connection: what came back, and its close. */
function raw(port: number) {
  const sock = net.connect(port, '127.0.0.1');
  let data = '';
  sock.on('data', (d) => (data += d.toString('latin1')));
  sock.on('error', () => {});
  const connected = new Promise<void>((r) => sock.once('connect', () => r()));
  let isClosed = false;
  const closed = new Promise<void>((r) => sock.once('close', () => ((isClosed = true), r())));
  return {
    sock,
    connected,
    closed,
    get isClosed() {
      return isClosed;
    },
    get data() {
      return data;
    },
    /** sends a keep-alive GET /healthz and waits for its whole answer */
    async get(): Promise<string> {
      const from = data.length;
      sock.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
      const end = Date.now() + 5000;
      for (;;) {
        const got = data.slice(from);
        const m = /content-length: (\d+)\r\n[\s\S]*?\r\n\r\n/i.exec(got);
        if (m && got.length >= m.index + m[0].length + Number(m[1])) return got;
        assert.ok(!isClosed, `the connection closed; got ${JSON.stringify(got.slice(0, 200))}`);
        assert.ok(Date.now() < end, `no answer in 5 s; got ${JSON.stringify(got.slice(0, 200))}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
  };
}

describe('MAX_CONNECTIONS_PER_ADDRESS', () => {
  let e: Env;
  let port: number;
  before(async () => {
    e = await setup('pglite', [], { MAX_CONNECTIONS_PER_ADDRESS: String(CAP) });
    port = Number(new URL(e.url).port);
  });
  after(() => e.close());

  test(`cap ${CAP}: the connection past it is closed at once, a request on an open one still works, and a closed one gives its place back`, { timeout: 30_000 }, async () => {
    const open = Array.from({ length: CAP }, () => raw(port));
    await Promise.all(open.map((c) => c.connected));
    // every one of them is served: the server counted them (a request answered means its connection was taken)
    for (const c of open) assert.match(await c.get(), /^HTTP\/1\.1 200/);
    // one more, with a request sent at once: closed without an answer (without the cap it would be served)
    const extra = raw(port);
    await extra.connected;
    extra.sock.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    await extra.closed;
    assert.equal(extra.data, '', 'the connection past the cap got an answer');
    assert.match(await e.t.runtime.scrape(), /portico_rate_limited_total\{reason="connections_per_address"\} 1\b/);
    // the ones already open keep working
    assert.match(await open[0]!.get(), /^HTTP\/1\.1 200/);
    // one goes: its place comes back (waited for, not timed: a new connection is tried until one is kept and served)
    open[1]!.sock.destroy();
    await open[1]!.closed;
    const end = Date.now() + 5000;
    let again = raw(port);
    for (;;) {
      await again.connected;
      // destroyed at the 'connection' event, or served
      const answered = again
        .get()
        .then(() => true)
        .catch(() => false);
      const served = await Promise.race([answered, again.closed.then(() => false)]);
      if (served) break;
      assert.ok(Date.now() < end, 'the closed connection did not give its place back');
      again = raw(port);
    }
    for (const c of [...open, again]) c.sock.destroy();
  });
});

describe('MAX_CONNECTIONS_PER_ADDRESS with TRUST_PROXY', () => {
  let e: Env;
  let port: number;
  before(async () => {
    // the proxy (here: loopback) carries every client's connections: it is not counted
    e = await setup('pglite', [], { MAX_CONNECTIONS_PER_ADDRESS: '2', TRUST_PROXY: 'loopback' });
    port = Number(new URL(e.url).port);
  });
  after(() => e.close());

  test('the addresses of TRUST_PROXY are not counted: twice the cap from the proxy, all served', { timeout: 30_000 }, async () => {
    const open = Array.from({ length: 4 }, () => raw(port));
    await Promise.all(open.map((c) => c.connected));
    for (const c of open) assert.match(await c.get(), /^HTTP\/1\.1 200/);
    assert.doesNotMatch(await e.t.runtime.scrape(), /portico_rate_limited_total\{reason="connections_per_address"\} [1-9]/);
    for (const c of open) c.sock.destroy();
  });
});

describe('capConnectionsPerAddress on a plain server', () => {
  const serve = async (opts: Parameters<typeof capConnectionsPerAddress>[1]) => {
    const server = net.createServer((s) => s.on('error', () => {}));
    const cap = capConnectionsPerAddress(server, opts);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    return { server, cap, port: (server.address() as net.AddressInfo).port };
  };

  test('an exempt address (a trusted proxy) is not counted', async () => {
    const { server, cap, port } = await serve({ max: 1, exempt: (a) => a === '127.0.0.1' || a === '::ffff:127.0.0.1' });
    const cs = Array.from({ length: 3 }, () => raw(port));
    await Promise.all(cs.map((c) => c.connected));
    // the server answers nothing: wait until it has seen the three, then check none was closed
    await new Promise<void>((resolve) => {
      const check = () => server.getConnections((_e, n) => (n >= 3 ? resolve() : setTimeout(check, 10)));
      check();
    });
    assert.equal(cs.filter((c) => c.isClosed).length, 0);
    assert.equal(cap.open('127.0.0.1'), 0);
    for (const c of cs) c.sock.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });

  test('counted per address, refused past the cap, told to onRefused; 0 is no cap', async () => {
    const refused: string[] = [];
    const { server, cap, port } = await serve({ max: 2, onRefused: (a) => refused.push(a) });
    const cs = [raw(port), raw(port)];
    await Promise.all(cs.map((c) => c.connected));
    const third = raw(port);
    await third.closed;
    assert.equal(refused.length, 1);
    assert.equal(cap.open(refused[0]!), 2);
    for (const c of cs) c.sock.destroy();
    await Promise.all(cs.map((c) => c.closed));
    const end = Date.now() + 5000;
    while (cap.open(refused[0]!) !== 0) {
      assert.ok(Date.now() < end, 'the closed connections were not given back');
      await new Promise((r) => setTimeout(r, 10));
    }
    await new Promise<void>((r) => server.close(() => r()));

    const off = await serve({ max: 0 });
    const many = Array.from({ length: 5 }, () => raw(off.port));
    await Promise.all(many.map((c) => c.connected));
    assert.equal(off.cap.open('127.0.0.1'), 0);
    for (const c of many) c.sock.destroy();
    await new Promise<void>((r) => off.server.close(() => r()));
  });
});
