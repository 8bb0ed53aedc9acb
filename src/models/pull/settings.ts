import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { readFileSync } from 'node:fs';
import { ConfigError } from '../../platform/config.js';

export const DEFAULT_HUB = 'https://huggingface.co';

/** What pulls need from the environment. */
export interface PullSettings {
  /** where pulled models and their catalogue (models.json) live: MODELS_DIR, default DATA_DIR/models */
  modelsDir: string;
  /** the Hugging Face hub (or a mirror): PORTICO_HF_ENDPOINT, then HF_ENDPOINT, default https://huggingface.co */
  hubEndpoint: string;
  /** HF_TOKEN (or the token file `huggingface-cli login` writes); sent to the hub only */
  token?: string;
  /** PORTICO_PULL_STALL_MS: a transfer that receives nothing for this long is cut and resumed (default 60 s) */
  stallMs?: number;
}

type Env = Record<string, string | undefined>;

export function hubEndpointFrom(env: Env): string {
  for (const name of ['PORTICO_HF_ENDPOINT', 'HF_ENDPOINT']) {
    const raw = env[name]?.trim();
    if (!raw) continue;
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      throw new ConfigError(`${name} is not a valid URL: "${raw}"`);
    }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new ConfigError(`${name} must start with https:// or http://`);
    if (u.search || u.hash) throw new ConfigError(`${name} must be a plain address without ?query or #fragment`);
    return u.href.replace(/\/+$/, '');
  }
  return DEFAULT_HUB;
}

/**
 * The Hugging Face token: HF_TOKEN, else the file `huggingface-cli login` writes (HF_TOKEN_PATH, else
 * $HF_HOME/token, else ~/.cache/huggingface/token), as huggingface_hub and node-llama-cpp read it.
 */
export function hubTokenFrom(env: Env): string | undefined {
  const direct = env.HF_TOKEN?.trim() || env.HUGGING_FACE_HUB_TOKEN?.trim();
  if (direct) return direct;
  const home = env.HF_HOME || join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache'), 'huggingface');
  const file = env.HF_TOKEN_PATH || join(home, 'token');
  try {
    const t = readFileSync(file, 'utf8').trim();
    return t || undefined;
  } catch {
    return undefined;
  }
}

export function modelsDirFrom(env: Env): string {
  if (env.MODELS_DIR?.trim()) return resolve(env.MODELS_DIR.trim());
  return join(resolve(env.DATA_DIR || './data'), 'models');
}

export function pullSettings(env: Env = process.env): PullSettings {
  return { modelsDir: modelsDirFrom(env), hubEndpoint: hubEndpointFrom(env), token: hubTokenFrom(env), stallMs: stallMsFrom(env) };
}

function stallMsFrom(env: Env): number | undefined {
  const raw = env.PORTICO_PULL_STALL_MS?.trim();
  if (!raw) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 100 || n > 3_600_000) throw new ConfigError(`PORTICO_PULL_STALL_MS must be a whole number of milliseconds from 100 to 3600000 (got "${raw}")`);
  return n;
}
