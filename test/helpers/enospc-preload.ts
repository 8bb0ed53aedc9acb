/**
 * Preloaded (node --import) into a `portico models pull` child process: the disk "fills up" once the partial
 * download files under PORTICO_TEST_ENOSPC_DIR reach PORTICO_TEST_ENOSPC_AFTER bytes, so writes fail with ENOSPC
 * as on a full disk. Nothing else is touched.
 */
import fsp from 'node:fs/promises';

const dir = process.env.PORTICO_TEST_ENOSPC_DIR;
const after = Number(process.env.PORTICO_TEST_ENOSPC_AFTER ?? 0);

if (dir) {
  const realOpen = fsp.open;
  const ours = new WeakSet<object>();
  let patched = false;
  fsp.open = (async (path: Parameters<typeof fsp.open>[0], ...rest: unknown[]) => {
    const fh = await (realOpen as (...a: unknown[]) => Promise<fsp.FileHandle>)(path, ...rest);
    if (String(path).startsWith(dir) && String(path).endsWith('.ipull')) {
      ours.add(fh);
      if (!patched) {
        patched = true;
        const proto = Object.getPrototypeOf(fh);
        const realWrite = proto.write;
        proto.write = function (this: object, buf: Buffer, off?: number, len?: number, pos?: number, ...more: unknown[]) {
          if (ours.has(this) && typeof pos === 'number' && pos + (len ?? buf.length) > after) {
            return Promise.reject(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' }));
          }
          return realWrite.call(this, buf, off, len, pos, ...more);
        };
      }
    }
    return fh;
  }) as typeof fsp.open;
}
