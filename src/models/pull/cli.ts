/**
 * `portico models pull|list|rm`: argument handling and output only; the work is pullModel and ModelCatalogue.
 */
import { parseArgs } from 'node:util';
import { ConfigError } from '../../platform/config.js';
import { ModelCatalogue, type PulledModel } from './catalogue.js';
import { PullError } from './errors.js';
import { formatBytes } from './format.js';
import { createProgressRenderer, type ProgressOutput } from './progress.js';
import { pullSettings } from './settings.js';
import { detectWhisperBinding, whisperInstallCommand } from '../../engines/whisper/index.js';

export const MODELS_HELP = `Usage:
  portico models pull <ref> [--name NAME] [--kind text|embedding] [--sha256 HEX]
      <ref>: hf:<owner>/<repo>[:<quant>]   the GGUF of that quantization (default Q4_K_M)
             hf:<owner>/<repo>/<file>      one file of a repository (.gguf, or a whisper.cpp ggml .bin)
             whisper:<name>                a whisper.cpp model (tiny, base.en, small, large-v3-turbo, ...)
             https://...                   a GGUF (or ggml) file anywhere
      e.g.   portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF
  portico models list [--json]              pulled models: name, kind, size, file
  portico models rm <name>                  remove a model (and its file); an alias removes only the alias
Settings: MODELS_DIR (default DATA_DIR/models), HF_TOKEN, PORTICO_HF_ENDPOINT (or HF_ENDPOINT)
`;

export interface ModelsCommandIo {
  env?: Record<string, string | undefined>;
  stdout?: ProgressOutput;
  stderr?: ProgressOutput;
  /** stop a pull (the CLI wires SIGINT/SIGTERM to it when not given) */
  signal?: AbortSignal;
}

class UsageError extends Error {}

function table(models: PulledModel[]): string {
  const head = ['NAME', 'KIND', 'SIZE', 'FILE'];
  const rows = [head, ...models.map((m) => [[m.name, ...m.aliases].join(', '), m.kind, formatBytes(m.size), m.path])];
  const widths = head.map((_, i) => Math.max(...rows.map((r) => r[i]?.length ?? 0)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')).join('\n') + '\n';
}

async function pull(args: string[], io: Required<Omit<ModelsCommandIo, 'signal'>> & { signal?: AbortSignal }): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { name: { type: 'string' }, kind: { type: 'string' }, sha256: { type: 'string' } },
  });
  const [ref] = positionals;
  if (positionals.length !== 1 || !ref) throw new UsageError('models pull takes one reference, e.g. portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF');
  if (values.kind !== undefined && values.kind !== 'text' && values.kind !== 'embedding') throw new UsageError('--kind must be text or embedding');
  const settings = pullSettings(io.env);
  const { pullModel } = await import('./pull.js');
  const progress = createProgressRenderer(io.stderr);
  let controller: AbortController | undefined;
  let onSignal: (() => void) | undefined;
  let signal = io.signal;
  if (!signal) {
    controller = new AbortController();
    signal = controller.signal;
    let stops = 0;
    onSignal = () => {
      if (++stops > 1) process.exit(130);
      controller!.abort();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  try {
    const r = await pullModel(ref, {
      modelsDir: settings.modelsDir,
      hubEndpoint: settings.hubEndpoint,
      token: settings.token,
      name: values.name,
      kind: values.kind as 'text' | 'embedding' | undefined,
      sha256: values.sha256,
      signal,
      onEvent: (e) => progress.event(e),
    });
    progress.end();
    const m = r.model;
    const names = [m.name, ...m.aliases].join(', ');
    io.stdout.write(
      r.status === 'present'
        ? `${m.name} is already pulled (${m.path}); served as ${names}\n`
        : `pulled ${m.name} (${m.kind}, ${formatBytes(m.size)}, sha256 ${m.sha256.slice(0, 12)}...) to ${m.path}; served as ${names}\n`,
    );
    if (m.kind === 'transcription' && !detectWhisperBinding(io.env.PORTICO_WHISPER_BINDING || undefined)) {
      io.stdout.write(`whisper-1 and the other transcription models use it once the whisper binding is installed (until then they answer 503): ${whisperInstallCommand()}\n`);
    }
    return 0;
  } catch (e) {
    progress.end();
    if (e instanceof PullError && e.code === 'interrupted' && signal.aborted) {
      io.stderr.write(`portico: ${e.message}\n`);
      return 130;
    }
    throw e;
  } finally {
    if (onSignal) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  }
}

/** Runs `portico models ...`; returns the exit code (0 ok, 1 failed, 2 bad usage, 130 stopped). */
export async function modelsCommand(args: string[], ioIn: ModelsCommandIo = {}): Promise<number> {
  const io = { env: ioIn.env ?? process.env, stdout: ioIn.stdout ?? process.stdout, stderr: ioIn.stderr ?? process.stderr, signal: ioIn.signal };
  const [sub, ...rest] = args;
  try {
    switch (sub) {
      case 'pull':
        return await pull(rest, io);
      case 'list':
      case 'ls': {
        const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { json: { type: 'boolean', default: false } } });
        if (positionals.length) throw new UsageError('models list takes no arguments');
        const models = await new ModelCatalogue(pullSettings(io.env).modelsDir).list();
        if (values.json) io.stdout.write(JSON.stringify(models, null, 2) + '\n');
        else if (models.length === 0) io.stdout.write('no models pulled yet; e.g. portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF\n');
        else io.stdout.write(table(models));
        return 0;
      }
      case 'rm':
      case 'remove': {
        const { positionals } = parseArgs({ args: rest, allowPositionals: true, options: {} });
        const [name] = positionals;
        if (positionals.length !== 1 || !name) throw new UsageError('models rm takes one model name (see portico models list)');
        const r = await new ModelCatalogue(pullSettings(io.env).modelsDir).remove(name);
        io.stdout.write(
          r.removed === 'model'
            ? `removed ${r.model.name} and deleted ${r.model.path}\n`
            : `removed the name ${positionals[0]}; the model stays as ${[r.model.name, ...r.model.aliases].join(', ')}\n`,
        );
        return 0;
      }
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        io.stdout.write(MODELS_HELP);
        return sub === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown models command "${sub}"`);
    }
  } catch (e) {
    if (e instanceof UsageError) {
      io.stderr.write(`portico: ${e.message}\n\n${MODELS_HELP}`);
      return 2;
    }
    if (e instanceof ConfigError || (e as { code?: string })?.code?.startsWith?.('ERR_PARSE_ARGS')) {
      io.stderr.write(`portico: ${(e as Error).message}\n`);
      return 2;
    }
    if (e instanceof PullError) {
      io.stderr.write(`portico: ${e.message}\n`);
      return e.code === 'bad_ref' || e.code === 'bad_name' ? 2 : 1;
    }
    throw e;
  }
}
