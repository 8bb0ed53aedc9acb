import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();

export function navigate(path: string, replace = false) {
  if (path === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  for (const l of listeners) l();
}

addEventListener('popstate', () => {
  for (const l of listeners) l();
});

/** The current path; re-renders on navigation. */
export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const l = () => setPath(location.pathname);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return path;
}

/** onClick for <a href>: navigate in the page unless the user asked for a new tab. */
export function linkClick(e: MouseEvent) {
  const a = e.currentTarget as HTMLAnchorElement;
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(a.getAttribute('href')!);
}
