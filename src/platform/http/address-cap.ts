/**
 * The cap on the connections one client address may hold open (MAX_CONNECTIONS_PER_ADDRESS, issue 22 §1): counted
 * at the socket, on the server's `connection` event, by the socket's remote address, and given back when the socket
 * closes. A connection past the cap is destroyed at once, before a byte of it is read, so one address cannot take
 * the process's MAX_CONNECTIONS (a WebSocket is a connection too). Addresses that `exempt` names are not counted:
 * a trusted reverse proxy carries every client's connections from its one address.
 */
import type { Server } from 'node:net';
import type { Socket } from 'node:net';

export interface AddressCapOptions {
  /** open connections one address may hold (0: no cap) */
  max: number;
  /** addresses that are not capped (a trusted proxy's); default: none */
  exempt?: (address: string) => boolean;
  /** told of each connection refused */
  onRefused?: (address: string) => void;
}

export interface AddressCap {
  /** connections the address holds now */
  open(address: string): number;
}

/** Caps the connections per address of `server` (nothing when `max` is 0). */
export function capConnectionsPerAddress(server: Server, o: AddressCapOptions): AddressCap {
  const open = new Map<string, number>();
  if (o.max > 0) {
    server.on('connection', (socket: Socket) => {
      const address = socket.remoteAddress;
      // a socket that is already gone has no address: nothing to count
      if (address === undefined || o.exempt?.(address)) return;
      const n = open.get(address) ?? 0;
      if (n >= o.max) {
        socket.destroy();
        o.onRefused?.(address);
        return;
      }
      open.set(address, n + 1);
      socket.once('close', () => {
        const left = (open.get(address) ?? 1) - 1;
        if (left > 0) open.set(address, left);
        else open.delete(address);
      });
    });
  }
  return { open: (address) => open.get(address) ?? 0 };
}
