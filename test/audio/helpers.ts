/**
 * Helpers of the audio API tests: ffprobe / ffmpeg on returned bytes, a strict SRT and WebVTT parser, word
 * error rate, the OpenAI SDK client against a listening Portico, and ffmpeg child processes of this process.
 */
import { waitFor } from '../helpers/wait.js';
import { encodeWav } from '../../src/codec/wav.js';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import type { TestApp } from '../helpers/app.js';

const execFileP = promisify(execFile);

export async function client(t: TestApp & { url?: string }, user = 'alice'): Promise<{ openai: OpenAI; key: string }> {
  const key = await t.inferenceKey(user);
  return { key, openai: new OpenAI({ apiKey: key, baseURL: t.url + '/v1', maxRetries: 0, timeout: 60_000 }) };
}

/** Runs a program with `input` on stdin; resolves with stdout (and stderr), rejects on a non-zero exit. */
export function run(cmd: string, args: string[], input?: Buffer): Promise<{ stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    p.stdout.on('data', (d: Buffer) => out.push(d));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.stdin.on('error', () => {});
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve({ stdout: Buffer.concat(out), stderr: err }) : reject(new Error(`${cmd} exited ${code}: ${err.slice(-500)}`))));
    p.stdin.end(input ?? Buffer.alloc(0));
  });
}

export interface Probed {
  formatName: string;
  codec: string;
  sampleRate: number;
  channels: number;
  /** seconds, from the decoded samples (not the container's estimate) */
  duration: number;
}

/**
 * One ffmpeg run on the bytes: the stream info from ffmpeg's own report of its input (what ffprobe would say: the
 * container, the codec, the sample rate, the channels, one stream) and the exact length from the samples it decodes
 * at the stream's own rate. `rawPcm` reads them as s16le 24 kHz mono. (An ffprobe run beside it cost a second
 * process start, ~0.2 s of CPU, for the same facts.)
 */
export async function probe(bytes: Buffer, rawPcm = false): Promise<Probed> {
  const inArgs = rawPcm ? ['-f', 's16le', '-ar', '24000', '-ac', '1'] : [];
  const { stdout, stderr } = await run('ffmpeg', ['-hide_banner', '-nostdin', ...inArgs, '-i', 'pipe:0', '-f', 's16le', '-ac', '1', 'pipe:1'], bytes);
  // the input's part of the report: from "Input #0" to the stream mapping
  const input = /^Input #0, ([^\n]*?), from 'pipe:0':\n([\s\S]*?)^Stream mapping:/m.exec(stderr);
  assert.ok(input, `ffmpeg's report of its input: ${stderr}`);
  const streams = input[2]!.split('\n').filter((l) => /^\s+Stream #0:\d+/.test(l));
  assert.equal(streams.length, 1, `one audio stream: ${streams.join(' | ')}`);
  const m = /: Audio: (\w+).*?, (\d+) Hz, (mono|stereo|(\d+) channels)/.exec(streams[0]!);
  assert.ok(m, `an audio stream: ${streams[0]}`);
  const sampleRate = Number(m[2]);
  return {
    formatName: input[1]!,
    codec: m[1]!,
    sampleRate,
    channels: m[3] === 'mono' ? 1 : m[3] === 'stereo' ? 2 : Number(m[4]),
    duration: stdout.length / 2 / sampleRate,
  };
}

/** RMS of decoded audio (to tell speech from silence). */
export async function rms(bytes: Buffer, rawPcm = false): Promise<number> {
  const inArgs = rawPcm ? ['-f', 's16le', '-ar', '24000', '-ac', '1'] : [];
  const dec = await run('ffmpeg', ['-v', 'error', ...inArgs, '-i', 'pipe:0', '-f', 's16le', '-ac', '1', 'pipe:1'], bytes);
  const n = dec.stdout.length >> 1;
  let s = 0;
  for (let i = 0; i < n; i++) s += dec.stdout.readInt16LE(i * 2) ** 2;
  return Math.sqrt(s / Math.max(1, n));
}

// ---------------------------------------------------------------- subtitles

export interface Cue {
  index?: number;
  start: number;
  end: number;
  text: string;
}

const SRT_TIME = /^(\d{2}):([0-5]\d):([0-5]\d),(\d{3}) --> (\d{2}):([0-5]\d):([0-5]\d),(\d{3})$/;
const VTT_TIME = /^(?:(\d{2,}):)?([0-5]\d):([0-5]\d)\.(\d{3}) --> (?:(\d{2,}):)?([0-5]\d):([0-5]\d)\.(\d{3})(?: .*)?$/;

const secs = (h: string | undefined, m: string, s: string, ms: string) => Number(h ?? 0) * 3600 + Number(m) * 60 + Number(s) + Number(ms) / 1000;

/**
 * A strict SubRip parser: blocks separated by one blank line, each `index\nHH:MM:SS,mmm --> HH:MM:SS,mmm\ntext...`,
 * indices 1, 2, 3..., start <= end, cues in order, file ends with a blank line. Throws on anything else.
 */
export function parseSrt(srt: string): Cue[] {
  if (srt === '') return [];
  if (srt.includes('\r')) throw new Error('srt: CR characters');
  if (!srt.endsWith('\n\n')) throw new Error('srt: must end with a blank line');
  const blocks = srt.slice(0, -2).split('\n\n');
  return blocks.map((b, i) => {
    const lines = b.split('\n');
    if (lines.length < 3) throw new Error(`srt: block ${i + 1} has ${lines.length} lines`);
    if (lines[0] !== String(i + 1)) throw new Error(`srt: block ${i + 1} index is ${JSON.stringify(lines[0])}`);
    const m = SRT_TIME.exec(lines[1]);
    if (!m) throw new Error(`srt: bad timing line ${JSON.stringify(lines[1])}`);
    const start = secs(m[1], m[2], m[3], m[4]);
    const end = secs(m[5], m[6], m[7], m[8]);
    if (end < start) throw new Error(`srt: cue ${i + 1} ends before it starts`);
    const text = lines.slice(2).join('\n');
    if (text.trim() === '') throw new Error(`srt: cue ${i + 1} has no text`);
    return { index: i + 1, start, end, text };
  });
}

/** A strict WebVTT parser (the subset whisper writes): `WEBVTT` header, blank line, cues with optional ids. */
export function parseVtt(vtt: string): Cue[] {
  if (vtt.includes('\r')) throw new Error('vtt: CR characters');
  if (!/^WEBVTT(?:[ \t][^\n]*)?\n\n/.test(vtt) && vtt !== 'WEBVTT\n' && vtt !== 'WEBVTT\n\n') throw new Error('vtt: must start with "WEBVTT" and a blank line');
  const body = vtt.replace(/^WEBVTT[^\n]*\n\n?/, '');
  if (body.trim() === '') return [];
  if (!body.endsWith('\n')) throw new Error('vtt: must end with a newline');
  const blocks = body.replace(/\n+$/, '').split('\n\n');
  return blocks.map((b, i) => {
    const lines = b.split('\n');
    let k = 0;
    if (!lines[0].includes('-->')) k = 1; // cue identifier
    if (lines[k]?.includes('-->') !== true) throw new Error(`vtt: block ${i + 1} has no timing line`);
    const m = VTT_TIME.exec(lines[k]);
    if (!m) throw new Error(`vtt: bad timing line ${JSON.stringify(lines[k])}`);
    const start = secs(m[1], m[2], m[3], m[4]);
    const end = secs(m[5], m[6], m[7], m[8]);
    if (end < start) throw new Error(`vtt: cue ${i + 1} ends before it starts`);
    const text = lines.slice(k + 1).join('\n');
    if (text.trim() === '') throw new Error(`vtt: cue ${i + 1} has no text`);
    if (text.includes('-->')) throw new Error(`vtt: cue ${i + 1} text contains -->`);
    return { start, end, text };
  });
}

// ---------------------------------------------------------------- word error rate

export function words(s: string): string[] {
  return s
    .toLowerCase()
    .replace(/o'clock/g, 'oclock')
    .replace(/[^a-z0-9' ]+/g, ' ')
    .split(/\s+/)
    .filter(Boolean);
}

/** (substitutions + deletions + insertions) / reference words, by edit distance over words. */
export function wordErrorRate(reference: string, hypothesis: string): number {
  const r = words(reference);
  const h = words(hypothesis);
  const d: number[][] = Array.from({ length: r.length + 1 }, (_, i) => Array.from({ length: h.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= r.length; i++) {
    for (let j = 1; j <= h.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (r[i - 1] === h[j - 1] ? 0 : 1));
    }
  }
  return d[r.length][h.length] / Math.max(1, r.length);
}

// ---------------------------------------------------------------- processes

/** ffmpeg processes that are children of this process. */
export async function ffmpegChildren(): Promise<number> {
  try {
    const { stdout } = await execFileP('ps', ['-o', 'comm=', '--ppid', String(process.pid)]);
    return stdout.split('\n').filter((l) => l.trim() === 'ffmpeg').length;
  } catch {
    return 0; // ps exits 1 when there is no child at all
  }
}

export async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  await waitFor(check, { timeoutMs, what });
}

/** A mono 16-bit PCM WAV file (the codec's own writer). */
export function wavFile(samples: Int16Array, rate: number): Buffer {
  return encodeWav(samples, rate);
}

/** Asserts an OpenAI-SDK error (or a fetch Response JSON) has the status, code and param. */
export function assertApiError(e: unknown, status: number, code?: string, param?: string | null, message?: RegExp): void {
  assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${String(e)}`);
  assert.equal(e.status, status, `status: ${e.message}`);
  const err = (e.error ?? {}) as { code?: string; param?: string | null; type?: string; message?: string };
  assert.equal(typeof err.message, 'string');
  assert.ok(err.type, 'error.type');
  if (code) assert.equal(err.code, code, e.message);
  if (param !== undefined) assert.equal(err.param, param);
  if (message) assert.match(err.message!, message);
}

export async function rejects(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  assert.fail('expected the request to fail');
}
