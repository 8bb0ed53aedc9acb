/**
 * An address whose connects hang, as a powered-off host's or one behind a firewall DROP do: a listening socket
 * with a backlog of 0 that never accepts (a python3 process: Node's servers always accept), its one queue place
 * taken by a connection of ours. Every further SYN is dropped by the kernel, so a connect neither succeeds nor
 * is refused until the client gives up. The process exits when its stdin closes (the test process ended).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';

export interface BlackHole {
  /** http://127.0.0.1:PORT/v1 */
  url: string;
  port: number;
  close(): Promise<void>;
}

const LISTEN = 'import socket,sys\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()\n';

export async function startBlackHole(): Promise<BlackHole> {
  const py: ChildProcess = spawn('python3', ['-c', LISTEN], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    py.once('error', reject);
    py.stdout!.once('data', (d: Buffer) => resolve(Number(String(d).trim())));
  });
  // the one place in the accept queue: taken (and completed) by this connection, so the next ones hang
  const filler = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    filler.once('connect', () => resolve());
    filler.once('error', reject);
  });
  // proven, not assumed: a connect now does not complete (the kernel drops its SYN)
  const probe = net.connect(port, '127.0.0.1');
  const state = await new Promise<string>((resolve) => {
    probe.once('connect', () => resolve('connected'));
    probe.once('error', (e) => resolve(`error ${(e as NodeJS.ErrnoException).code}`));
    setTimeout(() => resolve('hanging'), 200);
  });
  probe.destroy();
  if (state !== 'hanging') throw new Error(`black hole: a connect did not hang (${state})`);
  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    async close() {
      filler.destroy();
      py.stdin!.end();
      if (py.exitCode === null) await new Promise((r) => py.once('exit', r));
    },
  };
}
