/**
 * Measures the level of every embedded voice (npm run voices:levels), to set the fixed gains of the voice
 * table (`builtin.voices` of src/engines/flite/provider.ts and espeak/provider.ts). Not a test: it prints a Markdown table.
 *
 * Each voice speaks each calibration sentence with no gain (one sentence per request, as the engines split
 * text); the level of a sentence is its RMS over its speech span (src/engines/shared/loudness.ts). The
 * suggested gain is the target minus the mean level, rounded to 0.5 dB. The table also shows the level each
 * voice reaches with its current gain, and the spread between sentences (what hd quality removes).
 */
import { createFliteEngine } from '../src/engines/flite/index.js';
import { createEspeakEngine } from '../src/engines/espeak/index.js';
import { OPENAI_VOICES, embeddedVoiceFor } from '../src/audio/voices.js';
import { ESPEAK_TABLE_VOICES } from '../src/engines/espeak/provider.js';
import { speechLevelDb, TARGET_LEVEL_DBFS } from '../src/engines/shared/loudness.js';
import type { EmbeddedSpeechEngine } from '../src/engines/shared/tts.js';

/** Harvard sentences (IEEE 1969 recommended practice for speech quality measurements), lists 1 and 2. */
export const CALIBRATION_SENTENCES = [
  'The birch canoe slid on the smooth planks.',
  'Glue the sheet to the dark blue background.',
  "It's easy to tell the depth of a well.",
  'These days a chicken leg is a rare dish.',
  'Rice is often served in round bowls.',
  'The juice of lemons makes fine punch.',
  'The box was thrown beside the parked truck.',
  'The hogs were fed chopped corn and garbage.',
  'Four hours of steady work faced us.',
  'A large size in stockings is hard to sell.',
  'The boy was there when the sun rose.',
  'A rod is used to catch pink salmon.',
];

async function levelOf(engine: EmbeddedSpeechEngine, text: string, voice: string, pitch: number, gainDb: number): Promise<number> {
  const parts: Int16Array[] = [];
  let rate = 0;
  for await (const c of engine.synthesizeSentences([text], { text, voice, speed: 1, pitch, gainDb })) {
    parts.push(c.samples);
    rate = c.sampleRate;
  }
  const all = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  return speechLevelDb(all, rate);
}

async function main() {
  const flite = createFliteEngine({ poolSize: 1 });
  const espeak = createEspeakEngine({ poolSize: 1, warmVoices: ESPEAK_TABLE_VOICES });
  await Promise.all([flite.ready(), espeak.ready()]);
  const f = (x: number) => x.toFixed(1);
  console.log(`Levels over ${CALIBRATION_SENTENCES.length} sentences, target ${TARGET_LEVEL_DBFS} dBFS:\n`);
  console.log('| Voice | Engine voice | level without gain: mean (min..max) dBFS | suggested gain dB | table gain dB | with table gain: mean (min..max) dBFS |');
  console.log('| --- | --- | --- | ---: | ---: | --- |');
  for (const v of OPENAI_VOICES) {
    const t = embeddedVoiceFor(v);
    const engine = t.engine === 'flite' ? flite : espeak;
    const raw: number[] = [];
    const withGain: number[] = [];
    for (const s of CALIBRATION_SENTENCES) {
      raw.push(await levelOf(engine, s, t.voice, t.pitch ?? 1, 0));
      withGain.push(await levelOf(engine, s, t.voice, t.pitch ?? 1, t.gainDb));
    }
    // mean in the power domain
    const mean = (xs: number[]) => 10 * Math.log10(xs.reduce((a, x) => a + Math.pow(10, x / 10), 0) / xs.length);
    const suggested = Math.round((TARGET_LEVEL_DBFS - mean(raw)) * 2) / 2;
    console.log(
      `| ${v} | ${t.engine} ${t.voice}${t.pitch ? ` x${t.pitch}` : ''} | ${f(mean(raw))} (${f(Math.min(...raw))}..${f(Math.max(...raw))}) | ${f(suggested)} | ${f(t.gainDb)} | ` +
        `${f(mean(withGain))} (${f(Math.min(...withGain))}..${f(Math.max(...withGain))}) |`,
    );
  }
  await Promise.all([flite.close(), espeak.close()]);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
