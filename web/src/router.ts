import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();

let keepFocus = false;

/**
 * Goes to `path` in the page. `keepFocus`: the address changes but the screen stays (a dialog of the screen opened
 * or closed at an address of its own): the focus is left where the screen puts it, not moved to the heading.
 */
export function navigate(path: string, replace = false, opts: { keepFocus?: boolean } = {}) {
  if (path === location.pathname + location.search) return;
  keepFocus = opts.keepFocus === true;
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

/** Whether the last navigation asked to keep the focus (asked once: the page's focus effect reads it). */
export function focusKept(): boolean {
  const k = keepFocus;
  keepFocus = false;
  return k;
}
