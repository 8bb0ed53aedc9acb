/**
 * The catalogue of pulled models: MODELS_DIR/models.json, next to the files it describes.
 *
 * Why a file and not database rows: `portico models pull` must work while a server runs, and the embedded
 * database (PGlite) is locked by the process that has it open; and the catalogue must travel with the files (a
 * volume mounted elsewhere, a directory shared by several instances). Every write replaces the file atomically
 * (written aside, renamed over), under a lock file, so a reader sees the old list or the new one, never half of
 * one. A running server learns of changes through `watch` (fs.watch on the directory, for the instant case, and
 * a poll of the file, for network filesystems where another host's writes raise no local event).
 */
import { existsSync, mkdirSync, readFileSync, watch as fsWatch, type FSWatcher } from 'node:fs';
import { mkdir, open, readFile, rename, rm, rmdir, unlink } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, sep } from 'node:path';
import { PullError } from './errors.js';
import { acquireLock, LockBusyError } from './lock.js';
import type { ModelFormat, ModelKind } from './verify.js';

export const CATALOGUE_FILE = 'models.json';
const VERSION = 1;

export interface ModelSource {
  /** the reference as the user gave it */
  ref: string;
  /** where it was downloaded from (hub resolve URL or the URL given; never a signed CDN link) */
  url: string;
  /** owner/repo on the hub */
  repo?: string;
  /** the commit the file was taken from */
  revision?: string;
  /** the file's path in the repository */
  file?: string;
}

/** One pulled model, as stored in models.json (`file` relative to the models directory, '/'-separated). */
export interface StoredModel {
  name: string;
  aliases: string[];
  kind: ModelKind;
  format: ModelFormat;
  file: string;
  size: number;
  sha256: string;
  architecture?: string;
  source: ModelSource;
  pulledAt: string;
}

/** A pulled model with the absolute path of its file. */
export interface PulledModel extends StoredModel {
  path: string;
}

export interface CatalogueChange {
  models: PulledModel[];
  added: PulledModel[];
  removed: PulledModel[];
  /** same name, something else changed (aliases, file, checksum) */
  changed: PulledModel[];
}

export interface CatalogueWatch {
  close(): void;
}

const KINDS = new Set(['text', 'embedding', 'transcription', 'speech']);

export class ModelCatalogue {
  constructor(readonly dir: string) {}

  get path(): string {
    return join(this.dir, CATALOGUE_FILE);
  }

  /** The absolute path of a stored model's file; refuses paths that leave the models directory. */
  filePath(file: string): string {
    const p = normalize(join(this.dir, ...file.split('/')));
    if (isAbsolute(file) || file.split('/').includes('..') || !p.startsWith(normalize(this.dir) + sep)) {
      throw new PullError('catalogue_error', `${this.path}: the file "${file}" is outside ${this.dir}`);
    }
    return p;
  }

  private parse(text: string): StoredModel[] {
    let doc: any;
    try {
      doc = JSON.parse(text);
    } catch (e) {
      throw new PullError('catalogue_error', `${this.path} is not valid JSON (${(e as Error).message}); fix or delete it (pulled files stay in ${this.dir})`);
    }
    if (!doc || typeof doc !== 'object' || !Array.isArray(doc.models)) throw new PullError('catalogue_error', `${this.path} has no "models" list`);
    if (typeof doc.version === 'number' && doc.version > VERSION) throw new PullError('catalogue_error', `${this.path} was written by a newer Portico (version ${doc.version})`);
    const models: StoredModel[] = [];
    for (const [i, m] of doc.models.entries()) {
      if (!m || typeof m.name !== 'string' || typeof m.file !== 'string' || !KINDS.has(m.kind)) {
        throw new PullError('catalogue_error', `${this.path}: models[${i}] needs a name, a file and a kind (text, embedding, transcription or speech)`);
      }
      this.filePath(m.file);
      models.push({ ...m, aliases: Array.isArray(m.aliases) ? m.aliases.filter((a: unknown) => typeof a === 'string') : [] });
    }
    return models;
  }

  private withPaths(models: StoredModel[]): PulledModel[] {
    return models.map((m) => ({ ...m, path: this.filePath(m.file) }));
  }

  private async readStored(): Promise<StoredModel[]> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw new PullError('catalogue_error', `cannot read ${this.path}: ${(e as Error).message}`);
    }
    return this.parse(text);
  }

  /** Every pulled model (empty when nothing was pulled yet). */
  async list(): Promise<PulledModel[]> {
    return this.withPaths(await this.readStored());
  }

  /** Same as list, synchronously (for start-up code). */
  listSync(): PulledModel[] {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw new PullError('catalogue_error', `cannot read ${this.path}: ${(e as Error).message}`);
    }
    return this.withPaths(this.parse(text));
  }

  /** The model with this name or alias. */
  async find(name: string): Promise<PulledModel | undefined> {
    return (await this.list()).find((m) => m.name === name || m.aliases.includes(name));
  }

  /**
   * Read-modify-write under the lock: `fn` gets the stored list, may change it in place, and returns a result;
   * the file is rewritten (atomically) when the list changed.
   */
  async update<T>(fn: (models: StoredModel[]) => T | Promise<T>): Promise<T> {
    await mkdir(this.dir, { recursive: true });
    let lock;
    try {
      lock = await acquireLock(`${this.path}.lock`, { staleMs: 30_000, waitMs: 15_000 });
    } catch (e) {
      if (e instanceof LockBusyError) throw new PullError('catalogue_error', `${this.path} is locked (${e.holder}); if no portico command is running, delete ${e.path}`);
      throw e;
    }
    try {
      const models = await this.readStored();
      const before = JSON.stringify(models);
      const result = await fn(models);
      if (JSON.stringify(models) !== before) await this.write(models);
      return result;
    } finally {
      await lock.release();
    }
  }

  private async write(models: StoredModel[]): Promise<void> {
    const tmp = `${this.path}.${process.pid}.${Date.now()}.tmp`;
    const fh = await open(tmp, 'w', 0o644);
    try {
      await fh.writeFile(JSON.stringify({ version: VERSION, models }, null, 2) + '\n');
      await fh.sync();
    } catch (e) {
      await fh.close();
      await unlink(tmp).catch(() => {});
      throw e;
    }
    await fh.close();
    await rename(tmp, this.path);
  }

  /**
   * `rm <name>`: a model's name removes the model and deletes its file; an alias removes only the alias.
   * The catalogue is written first, so servers stop offering the model before its file goes.
   */
  async remove(name: string): Promise<{ removed: 'model' | 'alias'; model: PulledModel }> {
    const result = await this.update((models) => {
      const i = models.findIndex((m) => m.name === name);
      const named = models[i];
      if (named) {
        models.splice(i, 1);
        return { removed: 'model' as const, model: named };
      }
      const m = models.find((x) => x.aliases.includes(name));
      if (m) {
        m.aliases = m.aliases.filter((a) => a !== name);
        return { removed: 'alias' as const, model: m };
      }
      const known = models.flatMap((x) => [x.name, ...x.aliases]);
      throw new PullError('unknown_model', `no pulled model is called "${name}"; pulled: ${known.length ? known.join(', ') : '(none)'}`);
    });
    const model = { ...result.model, path: this.filePath(result.model.file) };
    if (result.removed === 'model') {
      await rm(model.path, { force: true });
      if (model.kind === 'speech') {
        // a piper voice's .onnx.json, and the files the engine made from them (src/engines/piper/voice-files.ts)
        await rm(`${model.path}.json`, { force: true });
        await rm(join(dirname(model.path), '.portico-piper'), { recursive: true, force: true });
      }
      // drop the folders the pull made (hf/<owner>/<repo>), if now empty
      for (let d = dirname(model.path); d.startsWith(normalize(this.dir) + sep); d = dirname(d)) {
        try {
          await rmdir(d);
        } catch {
          break;
        }
      }
    }
    return { removed: result.removed, model };
  }

  /**
   * Calls `onChange` with the current list at once (unless `initial: false`) and again whenever models.json
   * changes: at once on a local filesystem (fs.watch), within `pollMs` anywhere (default 2 s). A damaged file
   * goes to `onError` and the last good list stays in force.
   */
  watch(onChange: (change: CatalogueChange) => void, opts: { pollMs?: number; onError?: (e: Error) => void; initial?: boolean } = {}): CatalogueWatch {
    mkdirSync(this.dir, { recursive: true });
    let lastText: string | undefined;
    let last = new Map<string, PulledModel>();
    let closed = false;
    let pending: NodeJS.Timeout | undefined;
    const check = async () => {
      pending = undefined;
      if (closed) return;
      let text: string;
      try {
        text = existsSync(this.path) ? await readFile(this.path, 'utf8') : '';
      } catch (e) {
        opts.onError?.(e as Error);
        return;
      }
      if (text === lastText || closed) return;
      let models: PulledModel[];
      try {
        models = text ? this.withPaths(this.parse(text)) : [];
      } catch (e) {
        lastText = text;
        opts.onError?.(e as Error);
        return;
      }
      const first = lastText === undefined;
      lastText = text;
      const now = new Map(models.map((m) => [m.name, m]));
      const added = models.filter((m) => !last.has(m.name));
      const removed = [...last.values()].filter((m) => !now.has(m.name));
      const changed = models.filter((m) => last.has(m.name) && JSON.stringify(last.get(m.name)) !== JSON.stringify(m));
      last = now;
      if (first && opts.initial === false) return;
      onChange({ models, added, removed, changed });
    };
    const schedule = () => {
      if (!pending && !closed) pending = setTimeout(() => void check(), 20);
    };
    let watcher: FSWatcher | undefined;
    try {
      watcher = fsWatch(this.dir, { persistent: false }, (_event, file) => {
        if (!file || file === CATALOGUE_FILE) schedule();
      });
      watcher.on('error', () => {
        watcher?.close();
        watcher = undefined; // the poll carries on
      });
    } catch {
      watcher = undefined;
    }
    const poll = setInterval(schedule, opts.pollMs ?? 2000);
    poll.unref();
    void check();
    return {
      close() {
        closed = true;
        clearInterval(poll);
        if (pending) clearTimeout(pending);
        watcher?.close();
      },
    };
  }
}
