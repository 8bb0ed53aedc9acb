/**
 * ffmpeg as a streaming encoder and as a decoder. The binary is, in order: $PORTICO_FFMPEG or
 * $FFMPEG_PATH, the system `ffmpeg` on PATH, the one shipped in @ffmpeg-installer/ffmpeg (made
 * executable if its install lost the mode bit). Works with Debian's ffmpeg 5.x and the bundled 4.1.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { accessSync, chmodSync, constants as fsc, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';

// ---------------------------------------------------------------- binary

export interface FfmpegBinary {
  path: string;
  source: 'env' | 'system' | 'bundled';
}

let cached: FfmpegBinary | undefined;

function isExecutable(p: string): boolean {
  try {
    if (!statSync(p).isFile()) return false;
    accessSync(p, fsc.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, name);
    if (isExecutable(p)) return p;
  }
  return undefined;
}

/** The ffmpeg binary to use; throws FfmpegUnavailableError when there is none. Cached. */
export function ffmpegBinary(): FfmpegBinary {
  if (cached) return cached;
  const env = process.env.PORTICO_FFMPEG || process.env.FFMPEG_PATH;
  if (env) {
    if (!isExecutable(env)) throw new FfmpegUnavailableError(`ffmpeg binary ${env} (from the environment) is not executable`);
    return (cached = { path: env, source: 'env' });
  }
  const sys = onPath('ffmpeg');
  if (sys) return (cached = { path: sys, source: 'system' });
  const bundled = bundledFfmpegPath();
  if (bundled) return (cached = { path: bundled, source: 'bundled' });
  throw new FfmpegUnavailableError('ffmpeg was not found: install it (e.g. `apt-get install ffmpeg`) or the npm package @ffmpeg-installer/ffmpeg');
}

/** The binary of @ffmpeg-installer/ffmpeg, made executable if needed, or undefined. */
export function bundledFfmpegPath(): string | undefined {
  try {
    const require = createRequire(import.meta.url);
    const p = (require('@ffmpeg-installer/ffmpeg') as { path: string }).path;
    if (!isExecutable(p)) {
      try {
        chmodSync(p, 0o755);
      } catch {
        return undefined;
      }
    }
    return isExecutable(p) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Overrides the binary (tests, configuration). `undefined` goes back to automatic resolution. */
export function setFfmpegBinary(path: string | undefined): void {
  cached = path ? { path, source: 'env' } : undefined;
  closeSpareEncoders();
}

export class FfmpegUnavailableError extends Error {
  readonly code = 'ffmpeg_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'FfmpegUnavailableError';
  }
}

/** ffmpeg failed (non-zero exit, or killed by a signal we did not send). */
export class FfmpegError extends Error {
  readonly code = 'ffmpeg_failed';
  constructor(
    message: string,
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'FfmpegError';
  }
}

// ---------------------------------------------------------------- encoder

export type EncodedFormat = 'mp3' | 'opus' | 'aac' | 'flac';

/** Output options per format: one container on stdout, written as packets are produced. */
export function encoderArgs(format: EncodedFormat): string[] {
  switch (format) {
    case 'mp3':
      // no Xing/LAME header: it cannot be rewritten on a pipe and a zero one would announce 0 frames
      return ['-c:a', 'libmp3lame', '-b:a', '64k', '-write_xing', '0', '-id3v2_version', '0', '-f', 'mp3'];
    case 'opus':
      // Ogg Opus at 48 kHz; short pages so audio leaves the muxer every 100 ms instead of every second
      return ['-c:a', 'libopus', '-b:a', '32k', '-ar', '48000', '-application', 'voip', '-page_duration', '100000', '-f', 'ogg'];
    case 'aac':
      return ['-c:a', 'aac', '-b:a', '64k', '-f', 'adts'];
    case 'flac':
      return ['-c:a', 'flac', '-compression_level', '5', '-f', 'flac'];
  }
}

export interface EncoderOptions {
  /** sample rate of the s16le mono input */
  sampleRate: number;
  signal?: AbortSignal;
  /** internal: a pre-started process waiting for a request (does not keep the event loop alive) */
  spare?: boolean;
}

type Proc = ChildProcessByStdio<Writable, Readable, Readable>;

/**
 * One ffmpeg process encoding raw s16le mono from `write()` into one container of `format`, whose
 * bytes are read by iterating the encoder. `end()` after the last write; `kill()` (or the signal)
 * stops everything. Iteration throws FfmpegError if ffmpeg fails.
 */
export class FfmpegEncoder implements AsyncIterable<Buffer> {
  private readonly proc: Proc;
  private stderr = '';
  private killed = false;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly onAbort: () => void;
  private stdinError?: Error;

  constructor(
    readonly format: EncodedFormat,
    private opts: EncoderOptions,
  ) {
    const bin = ffmpegBinary();
    const args = [
      '-hide_banner',
      '-nostdin',
      '-loglevel',
      'error',
      // raw input needs no probing: without these ffmpeg reads ~2 s of input before encoding anything. No stream
      // analysis at all (-nofind_stream_info): with `nobuffer` the packets it read were dropped, the first 960
      // samples (40 ms) of every answer (Debian's 5.1 and the bundled 4.1 alike)
      '-probesize',
      '32',
      '-analyzeduration',
      '0',
      '-nofind_stream_info',
      '-fflags',
      'nobuffer',
      '-f',
      's16le',
      '-ar',
      String(opts.sampleRate),
      '-ac',
      '1',
      '-i',
      'pipe:0',
      '-vn',
      '-ac',
      '1',
      ...encoderArgs(format),
      '-flush_packets',
      '1',
      'pipe:1',
    ];
    this.proc = spawn(bin.path, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = new Promise((resolve) => {
      this.proc.on('close', (code, signal) => resolve({ code, signal }));
      this.proc.on('error', (err) => {
        this.stderr += String(err.message);
        resolve({ code: -1, signal: null });
      });
    });
    this.proc.stderr.setEncoding('utf8');
    this.proc.stderr.on('data', (d: string) => {
      if (this.stderr.length < 8192) this.stderr += d;
    });
    this.proc.stdin.on('error', (err) => {
      this.stdinError = err; // EPIPE when ffmpeg died: reported through the exit status
    });
    this.onAbort = () => this.kill();
    if (opts.spare) {
      this.proc.unref();
      for (const s of [this.proc.stdin, this.proc.stdout, this.proc.stderr]) (s as unknown as { unref?: () => void }).unref?.();
    } else this.listen(opts.signal);
  }

  private listen(signal?: AbortSignal): void {
    if (signal?.aborted) this.kill();
    else signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** a spare that is still running and untouched */
  get usable(): boolean {
    return !this.killed && !this.stdinError && this.proc.exitCode === null && this.proc.signalCode === null && !this.proc.stdin.destroyed;
  }

  /** Turns a spare into a request's encoder. */
  activate(signal?: AbortSignal): this {
    this.opts = { ...this.opts, spare: false, signal };
    this.proc.ref();
    for (const s of [this.proc.stdin, this.proc.stdout, this.proc.stderr]) (s as unknown as { ref?: () => void }).ref?.();
    this.listen(signal);
    return this;
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  /** Writes s16le bytes; resolves when ffmpeg's stdin accepted them (backpressure). */
  write(bytes: Uint8Array): Promise<void> {
    if (this.killed || this.stdinError || this.proc.stdin.destroyed) return Promise.resolve();
    if (bytes.length === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const ok = this.proc.stdin.write(bytes, () => resolve());
      if (!ok) this.proc.stdin.once('drain', () => resolve());
    });
  }

  end(): void {
    if (!this.proc.stdin.destroyed) this.proc.stdin.end();
  }

  kill(): void {
    if (this.killed) return;
    this.killed = true;
    this.proc.stdin.destroy();
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    try {
      for await (const chunk of this.proc.stdout) {
        if (this.killed) break;
        yield chunk as Buffer;
      }
      const { code, signal } = await this.exited;
      if (this.killed) return;
      if (code !== 0) {
        const msg = this.stderr.trim().split('\n').slice(-3).join(' | ');
        throw new FfmpegError(`ffmpeg ${this.format} encoder failed (${signal ?? `exit ${code}`}): ${msg}`, code, this.stderr);
      }
    } finally {
      this.opts.signal?.removeEventListener('abort', this.onAbort);
      if (this.proc.exitCode === null && this.proc.signalCode === null) this.kill();
    }
  }
}

// ---------------------------------------------------------------- spare encoders

/**
 * Starting ffmpeg costs ~10 ms for the static bundled binary but ~80 ms for a dynamically linked
 * system one. After a format is used once, one spare process for it is kept started and waiting on
 * stdin, so the next response does not wait for ffmpeg to start. A spare does not keep the process
 * alive; it exits by itself when Portico exits (its stdin closes). PORTICO_FFMPEG_SPARES=0 disables.
 */
const spares = new Map<string, FfmpegEncoder>();
let sparesEnabled = process.env.PORTICO_FFMPEG_SPARES !== '0';

export function setSpareEncoders(enabled: boolean): void {
  sparesEnabled = enabled;
  if (!enabled) closeSpareEncoders();
}

/** Number of spare processes waiting (for tests and metrics). */
export function spareEncoderCount(): number {
  return [...spares.values()].filter((e) => e.usable).length;
}

/** Kills the waiting spare processes (shutdown, or after changing the binary). */
export function closeSpareEncoders(): void {
  for (const e of spares.values()) e.kill();
  spares.clear();
}

/** An encoder for one response: a waiting spare when there is one, else a new process. */
export function startEncoder(format: EncodedFormat, opts: EncoderOptions): FfmpegEncoder {
  const key = `${format}:${opts.sampleRate}:${ffmpegBinary().path}`;
  const spare = spares.get(key);
  spares.delete(key);
  let enc: FfmpegEncoder;
  if (spare?.usable) enc = spare.activate(opts.signal);
  else {
    spare?.kill();
    enc = new FfmpegEncoder(format, { sampleRate: opts.sampleRate, signal: opts.signal });
  }
  if (sparesEnabled) {
    // started a little later, so it does not compete for CPU with this response's first bytes
    setTimeout(() => {
      if (!sparesEnabled || spares.has(key)) return;
      try {
        spares.set(key, new FfmpegEncoder(format, { sampleRate: opts.sampleRate, spare: true }));
      } catch {
        /* no ffmpeg: the next request reports it */
      }
    }, 200).unref();
  }
  return enc;
}

// ---------------------------------------------------------------- decoder

/** The upload is not audio ffmpeg can decode (or contains no audio). Maps to HTTP 400. */
export class AudioDecodeError extends Error {
  readonly code = 'invalid_audio';
  readonly status = 400;
  constructor(
    message: string,
    readonly detail?: string,
  ) {
    super(message);
    this.name = 'AudioDecodeError';
  }
}

export interface RunResult {
  stdout: Buffer;
  stderr: string;
  code: number | null;
}

/** Runs ffmpeg with `input` on stdin and collects stdout (bounded by maxBytes). */
export function runFfmpeg(args: string[], input: Uint8Array | null, opts: { signal?: AbortSignal; maxBytes?: number } = {}): Promise<RunResult> {
  const bin = ffmpegBinary();
  return new Promise((resolve, reject) => {
    const proc = spawn(bin.path, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let outLen = 0;
    let stderr = '';
    let tooBig = false;
    const onAbort = () => proc.kill('SIGKILL');
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    proc.stdout.on('data', (d: Buffer) => {
      outLen += d.length;
      if (opts.maxBytes && outLen > opts.maxBytes) {
        tooBig = true;
        proc.kill('SIGKILL');
        return;
      }
      out.push(d);
    });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (d: string) => {
      if (stderr.length < 65536) stderr += d;
    });
    proc.stdin.on('error', () => {});
    proc.on('error', (e) => {
      opts.signal?.removeEventListener('abort', onAbort);
      reject(e);
    });
    proc.on('close', (code) => {
      opts.signal?.removeEventListener('abort', onAbort);
      if (opts.signal?.aborted) return reject(opts.signal.reason ?? new DOMException('aborted', 'AbortError'));
      if (tooBig) return reject(new AudioDecodeError('The audio is too long'));
      resolve({ stdout: Buffer.concat(out), stderr, code });
    });
    if (input) proc.stdin.end(input);
    else proc.stdin.end();
  });
}

/** Container formats that keep their index at the end and cannot be read from a pipe (mp4/m4a/mov/3gp). */
function needsSeekableInput(bytes: Uint8Array): boolean {
  return bytes.length >= 12 && String.fromCharCode(...bytes.subarray(4, 8)) === 'ftyp';
}

/**
 * Decodes any audio ffmpeg understands to mono Float32 at `sampleRate`. Input goes through stdin,
 * except MP4-family files (their index may sit at the end), which go through a temporary file.
 * Throws AudioDecodeError for input that is not decodable audio.
 */
export async function ffmpegDecode(bytes: Uint8Array, sampleRate: number, opts: { signal?: AbortSignal; maxSeconds?: number } = {}): Promise<Float32Array> {
  let dir: string | undefined;
  let inputArg = 'pipe:0';
  let stdin: Uint8Array | null = bytes;
  if (needsSeekableInput(bytes)) {
    dir = await mkdtemp(join(tmpdir(), 'portico-decode-'));
    inputArg = join(dir, 'input');
    try {
      await writeFile(inputArg, bytes);
    } catch (e) {
      // a full disk: the folder must not stay behind
      await rm(dir, { recursive: true, force: true }).catch(() => {});
      throw e;
    }
    stdin = null;
  }
  try {
    const args = ['-hide_banner', '-nostdin', '-loglevel', 'error', '-i', inputArg, '-vn', '-sn', '-dn', '-ac', '1', '-ar', String(sampleRate), '-f', 'f32le', 'pipe:1'];
    const maxBytes = opts.maxSeconds ? Math.ceil(opts.maxSeconds * sampleRate * 4) : undefined;
    const r = await runFfmpeg(args, stdin, { signal: opts.signal, maxBytes });
    const detail = r.stderr.trim().split('\n').slice(-3).join(' | ');
    if (r.code !== 0) throw new AudioDecodeError('The file could not be decoded as audio', detail);
    const n = Math.floor(r.stdout.length / 4);
    if (n === 0) throw new AudioDecodeError('The file contains no audio', detail);
    const pcm = new Float32Array(n);
    const view = new DataView(r.stdout.buffer, r.stdout.byteOffset, n * 4);
    for (let i = 0; i < n; i++) pcm[i] = view.getFloat32(i * 4, true);
    return pcm;
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- probe

export interface ProbeResult {
  /** container as ffmpeg names it, e.g. "ogg", "mp3", "wav", "aac", "flac" */
  container: string;
  /** codec of the first audio stream, e.g. "opus", "mp3", "aac", "flac", "pcm_s16le" */
  codec: string;
  sampleRate: number;
  channels: number;
  /** seconds, counted from the decoded samples */
  duration: number;
  /** number of audio streams / containers seen ("Input #" lines) */
  inputs: number;
}

/** Decodes a whole file with ffmpeg and reports its format (works with either binary, no ffprobe needed). */
export async function probeAudio(bytes: Uint8Array, opts: { signal?: AbortSignal } = {}): Promise<ProbeResult> {
  const r = await runFfmpeg(['-hide_banner', '-nostdin', '-loglevel', 'info', '-i', 'pipe:0', '-vn', '-ac', '1', '-f', 's16le', 'pipe:1'], bytes, opts);
  if (r.code !== 0) throw new AudioDecodeError('The file could not be decoded as audio', r.stderr.trim().split('\n').slice(-3).join(' | '));
  const input = /Input #0, ([^,]+), from/.exec(r.stderr);
  const stream = /Stream #0:\d+[^:]*: Audio: ([\w-]+)[^,]*, (\d+) Hz, ([\w.()]+)/.exec(r.stderr);
  if (!stream) throw new AudioDecodeError('No audio stream found', r.stderr.slice(-500));
  // the three groups are not optional: a match always has them
  const [, codec = 'unknown', rate = '', layout = ''] = stream;
  const sampleRate = Number(rate);
  const channels = layout.startsWith('mono') ? 1 : layout.startsWith('stereo') ? 2 : Number(/^(\d+)/.exec(layout)?.[1] ?? 0);
  return {
    container: input?.[1] ?? 'unknown',
    codec,
    sampleRate,
    channels,
    duration: r.stdout.length / 2 / sampleRate,
    inputs: (r.stderr.match(/Input #/g) ?? []).length,
  };
}
