/**
 * `portico models pull|list|rm`: the work (pullModel, ModelCatalogue) and its output, on options already parsed.
 * The command line is parsed once, by the CLI (src/cli/main.ts, commander): its refusals (a missing or extra
 * argument, an unknown option, a --kind that is not a choice) never reach this module, which reads no argv.
 */
import { ConfigError } from '../../platform/config.js';
import { ModelCatalogue, type PulledModel } from './catalogue.js';
import { PullError } from './errors.js';
import { formatBytes } from './format.js';
import { createProgressRenderer, type ProgressOutput } from './progress.js';
import { pullSettings } from './settings.js';
import { detectWhisperBinding, whisperUnavailableHint } from '../../engines/whisper/index.js';
import { piper } from '../../engines/piper/provider.js';

/** Whether the neural voices' runtime (sherpa-onnx-node, optional) is installed here. */
const sherpaInstalled = () => piper.available?.({}) ?? true;

/** One `portico models` command, as the CLI parsed it. */
export type ModelsCommand =
  | {
      command: 'pull';
      /** hf:<owner>/<repo>[:<quant>] | hf:<owner>/<repo>/<file> | whisper:<name> | https://... */
      ref: string;
      /** --name: an extra name to serve the model under */
      name?: string;
      /** --kind: overrides the text/embedding classification of a GGUF */
      kind?: 'text' | 'embedding';
      /** --sha256: the expected SHA-256 */
      sha256?: string;
    }
  | { command: 'list'; json?: boolean }
  | { command: 'rm'; name: string };

export interface ModelsCommandIo {
  env?: Record<string, string | undefined>;
  stdout?: ProgressOutput;
  stderr?: ProgressOutput;
  /** stop a pull (the CLI wires SIGINT/SIGTERM to it when not given) */
  signal?: AbortSignal;
}

function table(models: PulledModel[]): string {
  const head = ['NAME', 'KIND', 'SIZE', 'FILE'];
  const rows = [head, ...models.map((m) => [[m.name, ...m.aliases].join(', '), m.kind, formatBytes(m.size), m.path])];
  const widths = head.map((_, i) => Math.max(...rows.map((r) => r[i]?.length ?? 0)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')).join('\n') + '\n';
}

async function pull(o: Extract<ModelsCommand, { command: 'pull' }>, io: Required<Omit<ModelsCommandIo, 'signal'>> & { signal?: AbortSignal }): Promise<number> {
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
    const r = await pullModel(o.ref, {
      modelsDir: settings.modelsDir,
      hubEndpoint: settings.hubEndpoint,
      token: settings.token,
      stallMs: settings.stallMs,
      name: o.name,
      kind: o.kind,
      sha256: o.sha256,
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
    if (m.kind === 'speech') {
      io.stdout.write(
        `POST /v1/audio/speech with model ${m.name} speaks the 13 OpenAI voice names as this voice's speakers (GET /v1/models shows which); tts-1 keeps the built-in voices\n`,
      );
      if (!sherpaInstalled()) io.stdout.write(`it needs sherpa-onnx-node, an optional dependency: run npm ci (without --omit=optional)\n`);
    }
    if (m.kind === 'transcription' && !detectWhisperBinding(io.env.PORTICO_WHISPER_BINDING || undefined)) {
      io.stdout.write(`whisper-1 and the other transcription models answer 503 until the whisper engine can run here: ${whisperUnavailableHint()}\n`);
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

/** Runs one `portico models` command; returns the exit code (0 ok, 1 failed, 2 refused reference or name, 130 stopped). */
export async function modelsCommand(cmd: ModelsCommand, ioIn: ModelsCommandIo = {}): Promise<number> {
  const io = { env: ioIn.env ?? process.env, stdout: ioIn.stdout ?? process.stdout, stderr: ioIn.stderr ?? process.stderr, signal: ioIn.signal };
  try {
    switch (cmd.command) {
      case 'pull':
        return await pull(cmd, io);
      case 'list': {
        const models = await new ModelCatalogue(pullSettings(io.env).modelsDir).list();
        if (cmd.json) io.stdout.write(JSON.stringify(models, null, 2) + '\n');
        else if (models.length === 0) io.stdout.write('no models pulled yet; e.g. portico models pull hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF\n');
        else io.stdout.write(table(models));
        return 0;
      }
      case 'rm': {
        const r = await new ModelCatalogue(pullSettings(io.env).modelsDir).remove(cmd.name);
        io.stdout.write(
          r.removed === 'model'
            ? `removed ${r.model.name} and deleted ${r.model.path}\n`
            : `removed the name ${cmd.name}; the model stays as ${[r.model.name, ...r.model.aliases].join(', ')}\n`,
        );
        return 0;
      }
    }
  } catch (e) {
    if (e instanceof ConfigError) {
      io.stderr.write(`portico: ${e.message}\n`);
      return 2;
    }
    if (e instanceof PullError) {
      io.stderr.write(`portico: ${e.message}\n`);
      return e.code === 'bad_ref' || e.code === 'bad_name' ? 2 : 1;
    }
    throw e;
  }
}
