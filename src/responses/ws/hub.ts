import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { WsConnection, CLOSE_GOING_AWAY, type WsDeps } from './connection.js';
import type { WsSocket } from './protocol.js';

/** how long a closing handshake may take at shutdown before the connection is cut */
const CLOSE_HANDSHAKE_MS = 2_000;

/** The open WebSocket connections of this process: accepted here, drained here at shutdown. */
export class WsHub {
  private readonly conns = new Set<WsConnection>();
  private closing = false;

  constructor(private readonly d: WsDeps & { log: FastifyBaseLogger }) {}

  get size() {
    return this.conns.size;
  }

  accept(socket: WsSocket, req: FastifyRequest) {
    if (this.closing) {
      socket.close(CLOSE_GOING_AWAY, 'server shutting down');
      return;
    }
    const c = new WsConnection(socket, req, this.d);
    this.conns.add(c);
    void c.done.then(() => this.conns.delete(c));
  }

  /**
   * Shutdown: every connection stops taking turns, its turn in flight gets `graceMs` to finish, and it closes
   * with 1001 (which the official SDK treats as worth reconnecting, elsewhere). A peer that does not answer the
   * closing handshake is cut after a short wait.
   */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    const all = [...this.conns];
    if (all.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const cut = new Promise<void>((r) => {
      timer = setTimeout(() => {
        for (const c of this.conns) c.terminate();
        r();
      }, graceMs + CLOSE_HANDSHAKE_MS);
    });
    await Promise.race([Promise.all(all.map((c) => c.drain(graceMs))), cut]);
    clearTimeout(timer);
    await Promise.all(all.map((c) => c.done));
  }
}
