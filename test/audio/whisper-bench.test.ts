/**
 * npm run bench:asr: the word error rate it prints, and a run on a folder of WAVs with their transcripts (a
 * generated random-weight model on the real binary: the figures are noise, the tool is what is checked).
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { normalizeWords, wordEdits } from '../../bench/lib/wer.js';
import { WHISPER_DIMS, writeWhisperGgml } from '../helpers/whisper-ggml.js';
import { wavFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'portico-bench-asr-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('WER: lower case, punctuation dropped, apostrophes inside words kept; substitutions, deletions and insertions count', () => {
  assert.deepEqual(normalizeWords("The birch canoe, slid on the 'smooth' planks. Don't!"), ['the', 'birch', 'canoe', 'slid', 'on', 'the', 'smooth', 'planks', "don't"]);
  assert.equal(wordEdits(['a', 'b', 'c'], ['a', 'b', 'c']), 0);
  assert.equal(wordEdits(['a', 'b', 'c'], ['a', 'x', 'c']), 1); // substitution
  assert.equal(wordEdits(['a', 'b', 'c'], ['a', 'c']), 1); // deletion
  assert.equal(wordEdits(['a', 'b', 'c'], ['a', 'b', 'c', 'd']), 1); // insertion
  assert.equal(wordEdits(['a', 'b'], []), 2);
  assert.equal(wordEdits([], ['a']), 1);
});

test('bench:asr transcribes each WAV that has its .txt, and prints WER and real-time factor per file and in total', async () => {
  const model = join(dir, 'ggml-test.en.bin');
  writeWhisperGgml(model, WHISPER_DIMS['test.en']);
  const clips = join(dir, 'clips');
  mkdirSync(clips);
  const s = new Int16Array(32000);
  for (let i = 0; i < s.length; i++) s[i] = Math.round(6000 * Math.sin((2 * Math.PI * 220 * i) / 16000) * (0.5 + 0.5 * Math.sin((2 * Math.PI * 4 * i) / 16000)));
  writeFileSync(join(clips, 'a.wav'), wavFile(s, 16000));
  writeFileSync(join(clips, 'a.txt'), 'The birch canoe slid on the smooth planks.\n');
  // no transcript beside it: skipped
  writeFileSync(join(clips, 'b.wav'), wavFile(s, 16000));
  const script = fileURLToPath(new URL('../../bench/asr.js', import.meta.url));
  const out = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(process.execPath, [script, '--model', model, '--dir', clips, '--threads', '2'], { timeout: 120_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
  assert.equal(out.code, 0, out.stderr.slice(-2000));
  assert.match(out.stdout, /^\| a\.wav \| 2\.0 \| \d+ \| \d+\.\d{3} \| \d+\.\d{3} \| \d+ \| \d+\.\d %/m);
  assert.doesNotMatch(out.stdout, /b\.wav/);
  assert.match(out.stdout, /total: 2\.0 s of audio in [\d.]+ s wall, [\d.]+ s CPU: real-time factor [\d.]+ \(wall\).*; WER \d+\.\d % \(\d+ edits \/ 8 words\)/);
});
