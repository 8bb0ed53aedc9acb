import type { RouteOptions } from 'fastify';

/**
 * Which methods each registered path answers, so a request with a wrong method on a known path is answered
 * 405 with `Allow` rather than 404 (RFC 9110, 15.5.6). Fed by an onRoute hook; asked only on the not-found path.
 */
export class AllowedMethods {
  private readonly routes: Array<{ re: RegExp; methods: Set<string> }> = [];
  private readonly byUrl = new Map<string, Set<string>>();

  add(route: RouteOptions) {
    const url = route.url;
    // catch-alls (CORS preflights, the page's assets) would make every path "known"
    if (!url || url.includes('*')) return;
    let methods = this.byUrl.get(url);
    if (!methods) {
      methods = new Set();
      this.byUrl.set(url, methods);
      const pattern = url
        .split('/')
        .map((part) => (part.startsWith(':') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
        .join('/');
      this.routes.push({ re: new RegExp(`^${pattern}/?$`), methods });
    }
    for (const m of Array.isArray(route.method) ? route.method : [route.method]) if (m !== 'OPTIONS') methods.add(m);
  }

  /** The methods the path answers (sorted), or [] when no route has that path. */
  allowed(rawUrl: string): string[] {
    const path = rawUrl.split('?')[0] ?? rawUrl;
    const out = new Set<string>();
    for (const r of this.routes) if (r.re.test(path)) for (const m of r.methods) out.add(m);
    return [...out].sort();
  }
}
