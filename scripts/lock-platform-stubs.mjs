#!/usr/bin/env node
// The registry these machines reach does not serve every platform binary of node-llama-cpp and
// msgpackr-extract (win32/darwin/riscv builds answer 404), so `npm install` leaves them out of
// package-lock.json and `npm ci` then refuses the lock as out of sync. This adds an entry for each
// such optional package with its os/cpu, so npm ci sees a complete lock and skips them on this platform.
// Run it after any `npm install` that rewrites the lock.
import { readFileSync, writeFileSync } from 'node:fs';

const STUBS = {
  '@msgpackr-extract/msgpackr-extract-darwin-arm64': ['darwin', 'arm64'],
  '@msgpackr-extract/msgpackr-extract-darwin-x64': ['darwin', 'x64'],
  '@msgpackr-extract/msgpackr-extract-linux-arm': ['linux', 'arm'],
  '@msgpackr-extract/msgpackr-extract-win32-x64': ['win32', 'x64'],
  '@node-llama-cpp/linux-riscv64': ['linux', 'riscv64'],
  '@node-llama-cpp/mac-arm64-metal': ['darwin', 'arm64'],
  '@node-llama-cpp/mac-x64': ['darwin', 'x64'],
  '@node-llama-cpp/win-arm64': ['win32', 'arm64'],
  '@node-llama-cpp/win-x64': ['win32', 'x64'],
  '@node-llama-cpp/win-x64-cuda': ['win32', 'x64'],
  '@node-llama-cpp/win-x64-cuda-ext': ['win32', 'x64'],
  '@node-llama-cpp/win-x64-vulkan': ['win32', 'x64'],
};

const lock = JSON.parse(readFileSync('package-lock.json', 'utf8'));
const pk = lock.packages;
const parentOf = (name) => (name.startsWith('@msgpackr-extract/') ? 'node_modules/msgpackr-extract' : 'node_modules/node-llama-cpp');
let added = 0;
for (const [name, [os, cpu]] of Object.entries(STUBS)) {
  const key = `node_modules/${name}`;
  const parent = pk[parentOf(name)];
  const version = parent?.optionalDependencies?.[name];
  if (!version || pk[key]) continue;
  pk[key] = { version, optional: true, os: [os], cpu: [cpu] };
  added++;
}
lock.packages = Object.fromEntries(Object.entries(pk).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)));
writeFileSync('package-lock.json', JSON.stringify(lock, null, 2) + '\n');
console.log(`lock-platform-stubs: ${added} entries added`);
