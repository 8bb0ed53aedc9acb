/** The part of a `ws` server-side WebSocket a realtime session uses. */
export interface WsSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  readonly protocol?: string;
  send(data: string, cb?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  on(event: 'message', listener: (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => void): unknown;
  on(event: 'close', listener: (code: number, reason: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

export const OPEN = 1;

/** a frame's text, or undefined for a binary frame */
export function frameText(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): string | undefined {
  if (isBinary) return undefined;
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data as ArrayBuffer).toString('utf8');
}
