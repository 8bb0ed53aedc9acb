/**
 * What sherpa-onnx needs of a piper voice besides the .onnx, made from what piper publishes (the .onnx and its
 * .onnx.json, as in rhasspy/piper-voices):
 * - tokens.txt: the phoneme symbols and their ids (the .onnx.json's phoneme_id_map), one "symbol id" a line;
 * - the ONNX metadata sherpa-onnx's VITS loader reads (sample_rate, n_speakers, comment=piper, voice, ...). piper's
 *   own files carry none, so a copy of the .onnx with them appended is kept beside the tokens. ONNX is protobuf:
 *   appending fields to a serialized message adds them, so no ONNX library is needed. Files that already carry
 *   them (sherpa-onnx's vits-piper-* conversions) are used as they are.
 * sherpa-onnx ends the process (exit) on a tokens file or data folder it cannot use, so everything it will read is
 * checked here first and refused with a message.
 */
import { createHash } from 'node:crypto';
import { access, copyFile, appendFile, mkdir, open, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { constants } from 'node:fs';
import { EngineError } from '../types.js';

/** What a piper voice's .onnx.json says, as the engine uses it. */
export interface PiperVoiceConfig {
  sampleRate: number;
  speakers: number;
  /** speaker names by id (multi-speaker voices), for listings */
  speakerNames: string[];
  /** espeak-ng voice of its phonemes (en-us) */
  espeakVoice: string;
  /** symbol -> id */
  phonemeIds: Map<string, number>;
  /** English name of its language */
  language: string;
}

function fail(message: string): EngineError {
  return new EngineError(message, 'engine_unavailable', 503);
}

/** Reads and checks a piper .onnx.json. */
export async function readPiperConfig(path: string): Promise<PiperVoiceConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw fail(
      `piper voice: cannot read its config ${basename(path)} (${(e as NodeJS.ErrnoException).code ?? 'unreadable'}); a piper voice is its .onnx and the .onnx.json published with it`,
    );
  }
  return parsePiperConfig(text, path);
}

/** Checks the text of a piper .onnx.json (`path` for messages). */
export function parsePiperConfig(text: string, path: string): PiperVoiceConfig {
  let doc: any;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw fail(`piper voice: its config ${basename(path)} is not JSON (${(e as Error).message})`);
  }
  const sampleRate = doc?.audio?.sample_rate;
  if (!Number.isInteger(sampleRate) || sampleRate < 8000 || sampleRate > 48000) throw fail(`piper voice ${basename(path)}: audio.sample_rate is missing or not a sample rate`);
  if (doc.phoneme_type !== undefined && doc.phoneme_type !== 'espeak') {
    throw fail(`piper voice ${basename(path)}: phoneme_type "${doc.phoneme_type}" is not supported (only espeak phonemes)`);
  }
  const map = doc.phoneme_id_map;
  if (!map || typeof map !== 'object') throw fail(`piper voice ${basename(path)}: no phoneme_id_map`);
  const phonemeIds = new Map<string, number>();
  for (const [sym, ids] of Object.entries(map)) {
    const id = Array.isArray(ids) ? ids[0] : undefined;
    if (!Number.isInteger(id) || (id as number) < 0) throw fail(`piper voice ${basename(path)}: phoneme_id_map entry ${JSON.stringify(sym)} has no id`);
    // sherpa-onnx's tokens file takes one code point per symbol (and ends the process on any other): espeak-ng's
    // phonemes come one code point at a time, so a longer symbol could never be spoken anyway; a line break would
    // split the line
    if ([...sym].length !== 1 || /[\n\r\t\v\f]/.test(sym)) continue;
    phonemeIds.set(sym, id as number);
  }
  for (const s of ['_', '^', '$']) if (!phonemeIds.has(s)) throw fail(`piper voice ${basename(path)}: phoneme_id_map has no "${s}" (pad, start, end)`);
  const speakers = Number.isInteger(doc.num_speakers) && doc.num_speakers > 0 ? (doc.num_speakers as number) : 1;
  const speakerNames: string[] = [];
  if (doc.speaker_id_map && typeof doc.speaker_id_map === 'object') {
    for (const [name, id] of Object.entries(doc.speaker_id_map)) if (Number.isInteger(id) && (id as number) < speakers) speakerNames[id as number] = name;
  }
  return {
    sampleRate,
    speakers,
    speakerNames,
    espeakVoice: typeof doc.espeak?.voice === 'string' && /^[A-Za-z0-9_+-]{1,40}$/.test(doc.espeak.voice) ? doc.espeak.voice : 'en-us',
    phonemeIds,
    language: typeof doc.language?.name_english === 'string' ? doc.language.name_english : 'English',
  };
}

/** tokens.txt as sherpa-onnx reads it (a space is written as the id alone: its reader takes a lone number as " "). */
export function tokensText(ids: ReadonlyMap<string, number>): string {
  return [...ids].map(([sym, id]) => (sym === ' ' ? `${id}` : `${sym} ${id}`)).join('\n') + '\n';
}

// ---------------------------------------------------------------- ONNX metadata

function readVarint(b: Buffer, at: number): [bigint, number] {
  let v = 0n;
  let shift = 0n;
  for (let i = at; i < b.length; i++) {
    const byte = b[i]!;
    v |= BigInt(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return [v, i + 1];
    shift += 7n;
    if (shift > 63n) break;
  }
  throw new Error('bad varint');
}

function writeVarint(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
}

function lenField(field: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([...writeVarint((field << 3) | 2), ...writeVarint(body.length)]), body]);
}

/** ModelProto.metadata_props entries (field 14) that add `meta` when appended to a serialized model. */
export function metadataProps(meta: Readonly<Record<string, string | number>>): Buffer {
  return Buffer.concat(Object.entries(meta).map(([k, v]) => lenField(14, Buffer.concat([lenField(1, Buffer.from(k)), lenField(2, Buffer.from(String(v)))]))));
}

/**
 * The metadata keys of an ONNX model: its top-level fields are walked (the graph, often most of the file, is
 * skipped by its length, read in small pieces), and the keys of its metadata_props collected.
 */
export async function onnxMetadataKeys(path: string): Promise<Set<string>> {
  const fh = await open(path, 'r');
  const keys = new Set<string>();
  try {
    const { size } = await fh.stat();
    let pos = 0;
    const head = Buffer.alloc(20);
    while (pos < size) {
      const { bytesRead } = await fh.read(head, 0, 20, pos);
      const [tag, afterTag] = readVarint(head.subarray(0, bytesRead), 0);
      const field = Number(tag >> 3n);
      const wire = Number(tag & 7n);
      if (wire === 0) {
        pos += readVarint(head.subarray(0, bytesRead), afterTag)[1];
      } else if (wire === 2) {
        const [len, afterLen] = readVarint(head.subarray(0, bytesRead), afterTag);
        const start = pos + afterLen;
        if (field === 14 && len < 1n << 20n) {
          const body = Buffer.alloc(Number(len));
          await fh.read(body, 0, body.length, start);
          // StringStringEntryProto: key = field 1
          let p = 0;
          while (p < body.length) {
            const [t, a] = readVarint(body, p);
            const [l, b] = readVarint(body, a);
            if (Number(t) === ((1 << 3) | 2)) keys.add(body.toString('utf8', b, b + Number(l)));
            p = b + Number(l);
          }
        }
        pos = start + Number(len);
      } else if (wire === 5) pos += afterTag + 4;
      else if (wire === 1) pos += afterTag + 8;
      else throw new Error(`unexpected wire type ${wire}`);
    }
    if (pos !== size) throw new Error('truncated');
  } catch (e) {
    throw fail(`piper voice: ${basename(path)} is not an ONNX model (${(e as Error).message})`);
  } finally {
    await fh.close();
  }
  return keys;
}

// ---------------------------------------------------------------- the prepared files

export interface PreparedVoice {
  /** the .onnx sherpa-onnx loads (the original, or the copy with metadata) */
  model: string;
  tokens: string;
  config: PiperVoiceConfig;
}

async function writable(dir: string): Promise<boolean> {
  try {
    await mkdir(dir, { recursive: true });
    await access(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

async function fileId(path: string): Promise<string> {
  const s = await stat(path);
  return createHash('sha256').update(`${path}\0${s.size}\0${s.mtimeMs}`).digest('hex').slice(0, 16);
}

/** Writes `data` to `path` through a file aside, renamed over it: a reader never sees half a file. */
async function writeAtomic(path: string, make: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  await make(tmp);
  await rename(tmp, path);
}

/**
 * The files sherpa-onnx loads for the piper voice `model` (with `configPath`, default `<model>.json`), made once
 * beside the model (in `.portico-piper/`) or, when that folder cannot be written, under the system's temp folder.
 */
export async function prepareVoice(model: string, configPath = `${model}.json`): Promise<PreparedVoice> {
  try {
    await access(model, constants.R_OK);
  } catch {
    throw fail(`piper voice: the model file ${basename(model)} cannot be read`);
  }
  const config = await readPiperConfig(configPath);
  const id = await fileId(model);
  const beside = join(dirname(model), '.portico-piper');
  const dir = (await writable(beside)) ? beside : join(tmpdir(), 'portico-piper');
  await mkdir(dir, { recursive: true });
  const stem = `${basename(model).replace(/\.onnx$/i, '')}-${id}`;
  const tokens = join(dir, `${stem}.tokens.txt`);
  await writeAtomic(tokens, (tmp) => writeFile(tmp, tokensText(config.phonemeIds)));
  const keys = await onnxMetadataKeys(model);
  if (keys.has('comment') && keys.has('sample_rate') && keys.has('n_speakers')) return { model, tokens, config };
  const patched = join(dir, `${stem}.onnx`);
  const exists = await stat(patched).then(
    () => true,
    () => false,
  );
  if (!exists) {
    const meta = metadataProps({
      model_type: 'vits',
      comment: 'piper',
      language: config.language,
      voice: config.espeakVoice,
      has_espeak: 1,
      n_speakers: config.speakers,
      sample_rate: config.sampleRate,
      add_blank: 0,
    });
    await writeAtomic(patched, async (tmp) => {
      await copyFile(model, tmp);
      await appendFile(tmp, meta);
    });
  }
  return { model: patched, tokens, config };
}
