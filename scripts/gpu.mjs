#!/usr/bin/env node
// `npm run gpu -- cuda|vulkan|cpu`: which GPU build of llama.cpp this install has. By default none is installed:
// package.json's overrides put a tiny stand-in (stubs/) where node-llama-cpp's CUDA and Vulkan builds would go,
// so `npm ci` does not download hundreds of MB nobody asked for and llama runs on its CPU build. This command
// drops the stand-in for the builds asked for (or puts it back for `cpu`) and runs `npm install`, which downloads
// them: a download the user asks for. LLAMA_GPU=auto (the default) then uses the GPU when one is found.
import { readFileSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

const STUB = 'file:../../stubs/portico-no-gpu-binary-1.0.0.tgz';
const BUILDS = {
  cuda: ['linux-x64-cuda', 'linux-x64-cuda-ext', 'win-x64-cuda', 'win-x64-cuda-ext'],
  vulkan: ['linux-x64-vulkan', 'win-x64-vulkan'],
};
const want = process.argv[2];
if (want !== 'cuda' && want !== 'vulkan' && want !== 'cpu') {
  console.error('usage: npm run gpu -- cuda | vulkan | cpu   (cpu: remove the GPU builds again)');
  process.exit(2);
}
const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
pkg.overrides ??= {};
if (want === 'cpu') for (const b of [...BUILDS.cuda, ...BUILDS.vulkan]) pkg.overrides[`@node-llama-cpp/${b}`] = STUB;
else for (const b of BUILDS[want]) delete pkg.overrides[`@node-llama-cpp/${b}`];
writeFileSync('package.json', JSON.stringify(pkg, null, 2) + '\n');
console.log(
  want === 'cpu' ? 'portico: GPU builds of llama.cpp removed; installing...' : `portico: installing node-llama-cpp's ${want} build (a download of several hundred MB)...`,
);
const r = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['install', '--no-audit', '--no-fund'], { stdio: 'inherit' });
process.exit(r.status ?? 1);
