/**
 * The microphone's AudioWorklet (loaded by the Talk tab from /assets, which the page's CSP allows as 'self'; a blob:
 * or data: module would need script-src to allow them). It runs on the audio thread: mono, resampled to 24 kHz,
 * 16-bit, posted to the page in chunks of CHUNK_MS (the buffers transferred, not copied).
 */
import { RATE, Resampler, toPcm16 } from './pcm.js';

// the AudioWorkletGlobalScope's names (not in TypeScript's DOM library)
declare const sampleRate: number;
declare class AudioWorkletProcessor {
  readonly port: MessagePort;
}
declare function registerProcessor(name: string, ctor: new () => AudioWorkletProcessor): void;

const CHUNK_MS = 50;
const CHUNK = (RATE * CHUNK_MS) / 1000;

class Capture extends AudioWorkletProcessor {
  private readonly resampler = new Resampler(sampleRate);
  private buf = new Float32Array(CHUNK);
  private fill = 0;

  process(inputs: Float32Array[][]): boolean {
    const channels = inputs[0];
    if (!channels?.length) return true;
    let mono = channels[0];
    if (channels.length > 1) {
      mono = new Float32Array(mono.length);
      for (const c of channels) for (let i = 0; i < c.length; i++) mono[i] += c[i] / channels.length;
    }
    const out = this.resampler.push(mono);
    for (let i = 0; i < out.length; i++) {
      this.buf[this.fill++] = out[i];
      if (this.fill === CHUNK) {
        const pcm = toPcm16(this.buf);
        this.port.postMessage(pcm, [pcm.buffer]);
        this.fill = 0;
      }
    }
    return true;
  }
}

registerProcessor('portico-capture', Capture);
