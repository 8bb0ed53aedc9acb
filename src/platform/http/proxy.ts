import { BlockList, isIP } from 'node:net';
import type { TrustProxy } from '../config.js';

/**
 * Trusted proxies (TRUST_PROXY, src/platform/config.ts). Fastify takes them as its `trustProxy` option, so `req.ip`
 * is the client's address as the proxies say (X-Forwarded-For, read from the right, past the trusted hops); without
 * the setting `req.ip` is the socket's peer and the header is ignored, so a client cannot choose its own address.
 */

/**
 * Fastify's `trustProxy` for the setting: the proxies' addresses and networks, or for a hop count "the first n hops
 * (the socket's peer being hop 0) are proxies", as Fastify reads a number; false when unset.
 */
export function fastifyTrustProxy(trust: TrustProxy | undefined): false | string[] | ((address: string, hop: number) => boolean) {
  if (trust === undefined) return false;
  const hops = trust.hops;
  if (hops !== undefined) return (_address, hop) => hop < hops;
  return trust.cidrs ?? false;
}

/** `::ffff:10.0.0.1` (an IPv4 client on a dual-stack socket) as `10.0.0.1` */
function plain(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

/** A BlockList of the setting's addresses and networks (IPv4 and IPv6). */
export function proxyList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const c of cidrs) {
    const [address, prefix] = c.split('/') as [string, string | undefined];
    const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return list;
}

/**
 * Whether a connection from `address` (a socket's peer) comes from a trusted proxy: every peer when the setting is
 * a hop count (the peer is always the nearest proxy), a listed address or network otherwise, none when unset. For
 * per-address limits that must not count every client behind one proxy as one.
 */
export function trustedProxyCheck(trust: TrustProxy | undefined): (address: string | undefined) => boolean {
  if (trust === undefined) return () => false;
  if (trust.hops !== undefined) return (address) => address !== undefined;
  const list = proxyList(trust.cidrs ?? []);
  return (address) => {
    if (address === undefined) return false;
    const a = plain(address);
    const v = isIP(a);
    return v !== 0 && list.check(a, v === 6 ? 'ipv6' : 'ipv4');
  };
}

/** One-off form of trustedProxyCheck (builds the list each call: make the check once for a hot path). */
export function isTrustedProxy(trust: TrustProxy | undefined, address: string | undefined): boolean {
  return trustedProxyCheck(trust)(address);
}
