/**
 * The router's own cost (npm run bench:routing). Not a test: it prints figures.
 *
 * An in-process text engine that answers at once (one text event, then done) is called the three ways a
 * request can reach it, in the same run: straight (engine.generate), through the router with one deployment,
 * and through the router with three deployments (weighted random). The difference is what routing adds per
 * request: choosing a deployment, the breaker and limit checks, the try's timers and AbortSignal, and the
 * events passed through. No network, no HTTP: the figure is the router's alone (bench:responses has it end to end).
 *
 * Env: BENCH_ITERATIONS (default 200000), BENCH_ROUNDS (default 5; the median round is reported).
 */
import os from 'node:os';
import type { GenerateEvent, GenerateRequest, TextEngine } from '../src/engines/types.js';
import { EngineRegistry } from '../src/engines/registry.js';
import type { Provider } from '../src/engines/provider.js';
import { ModelRegistry } from '../src/models/registry.js';
import { Router } from '../src/models/router/index.js';
import type { ModelSpec } from '../src/models/spec.js';

const N = Number(process.env.BENCH_ITERATIONS || 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);

const instant: TextEngine = {
  kind: 'instant',
  async *generate(): AsyncGenerator<GenerateEvent> {
    yield { type: 'text_delta', delta: 'hi' };
    yield { type: 'done', finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 } };
  },
  countTokens: async () => 1,
  close: async () => {},
};
const provider = { name: 'instant', summary: '', serves: ['text'], options: {}, create: { text: async () => instant } } as unknown as Provider;

async function drain(engine: TextEngine, req: GenerateRequest) {
  for await (const e of engine.generate(req)) if (e.type === 'done' && e.usage.outputTokens !== 1) throw new Error('bad');
}

async function timeIt(engine: TextEngine, req: GenerateRequest): Promise<number> {
  const ns: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) await drain(engine, req);
    ns.push(Number(process.hrtime.bigint() - t0) / N);
  }
  ns.sort((a, b) => a - b);
  return ns[Math.floor(ns.length / 2)]!;
}

async function main() {
  const dep = (id: string) => ({ id, name: id, provider: 'instant', type: 'text' as const, weight: 1, upstream_model: 'm' });
  const one = { name: 'one', provider: 'instant', type: 'text' } as ModelSpec;
  const three = { name: 'three', provider: 'instant', type: 'text', deployments: [dep('t#1'), dep('t#2'), dep('t#3')] } as ModelSpec;
  const engines = new EngineRegistry(new Map([['instant', provider]]), { env: {}, ttsPoolSize: 1, llamaGpu: 'cpu', log: { info() {}, warn() {} } });
  const router = new Router({ engines, models: new ModelRegistry([one, three]) });
  const req: GenerateRequest = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
  const routedOne = await router.text(one);
  const routedThree = await router.text(three);
  // warm-up
  for (const e of [instant, routedOne, routedThree]) for (let i = 0; i < 20_000; i++) await drain(e, req);
  const direct = await timeIt(instant, req);
  const r1 = await timeIt(routedOne, req);
  const r3 = await timeIt(routedThree, req);
  const cpus = os.cpus();
  const us = (n: number) => (n / 1000).toFixed(2);
  console.log(`Machine: ${cpus.length} cores (${cpus[0]?.model.trim()}), Node ${process.version}; ${N} requests a round, median of ${ROUNDS} rounds.`);
  console.log('');
  console.log('| Path | µs per request | added by routing µs | ratio to direct |');
  console.log('|---|---:|---:|---:|');
  console.log(`| engine direct | ${us(direct)} | - | 1.00 |`);
  console.log(`| router, 1 deployment | ${us(r1)} | ${us(r1 - direct)} | ${(r1 / direct).toFixed(2)} |`);
  console.log(`| router, 3 deployments | ${us(r3)} | ${us(r3 - direct)} | ${(r3 / direct).toFixed(2)} |`);
  await engines.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
