#!/usr/bin/env node
// `npm run lint`'s formatting step: prettier --check over the files git tracks (a new file once it is added), not over
// whatever lies in the directory: a build copied aside, a benchmark's output or an editor's backup left in a
// checkout made `prettier --check .` fail with files that are not part of the project. Outside a git checkout (a
// tarball), the whole directory as before. Prettier's own ignore files still apply (.prettierignore: docs, *.md).
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';

const prettier = createRequire(import.meta.url).resolve('prettier/bin/prettier.cjs');
const git = spawnSync('git', ['ls-files', '-z', '--cached'], { encoding: 'utf8', maxBuffer: 64 << 20 });
const files = git.status === 0 ? git.stdout.split('\0').filter(Boolean) : ['.'];
// --ignore-unknown: a tracked file prettier has no parser for (a shell script, a PNG) is not an error
const r = spawnSync(process.execPath, [prettier, '--check', '--ignore-unknown', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
