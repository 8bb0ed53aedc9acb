/**
 * A TLS front for a local server: the official SDK's realtime client always opens `wss://` (it sets the URL's
 * protocol itself), so tests reach a plain-HTTP Portico through this, as a deployment does through its TLS proxy.
 * The certificate is made once per process by openssl (self-signed, for 127.0.0.1); clients trust it with `ca`.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:tls';

let made: { key: string; cert: string } | undefined;

function certificate(): { key: string; cert: string } {
  if (made) return made;
  const dir = mkdtempSync(join(tmpdir(), 'portico-tls-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'k.pem'),
        '-out',
        join(dir, 'c.pem'),
        '-days',
        '2',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
      ],
      {
        stdio: 'ignore',
      },
    );
    made = { key: readFileSync(join(dir, 'k.pem'), 'utf8'), cert: readFileSync(join(dir, 'c.pem'), 'utf8') };
    return made;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface TlsFront {
  /** https://127.0.0.1:<port> */
  url: string;
  /** the certificate to trust */
  ca: string;
  close(): Promise<void>;
}

export async function tlsFront(targetPort: number): Promise<TlsFront> {
  const { key, cert } = certificate();
  const sockets = new Set<Socket>();
  const server = createServer({ key, cert }, (client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    client.pipe(upstream).pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `https://127.0.0.1:${port}`,
    ca: cert,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
