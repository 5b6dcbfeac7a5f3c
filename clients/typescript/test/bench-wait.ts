/**
 * Load for bench/gateway_wait_bench.py: many concurrent runs through one GatewayClient at a
 * fixed offered rate of tool calls, for one wait budget; prints one JSON line (stdout) with
 * every measured beforeTool latency and the client's stats.
 *
 *   node build/test/bench-wait.js --brokers 127.0.0.1:9092 [--prefix loopguard] \
 *       [--rate 1000] [--runs 400] [--seconds 10] [--warmup 2] [--wait-budget-ms 50]
 *
 * Run i starts at i / rate seconds and then calls every runs / rate seconds (so the runs
 * together offer `rate` calls/s, evenly spread); each call is beforeTool (which waits for the
 * run's RunWatermark, up to the budget) then afterTool. The arguments differ on every call, so
 * the worker draws no decisions: what is measured is the wait itself. Calls that start during
 * the first `warmup` seconds are not measured. A run whose call takes longer than its period
 * calls again at once (the offered rate is then not reached; `achievedRate` says so).
 */

import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { GatewayClient, type GatewayRun } from '../src';
import { CapturingLogger } from './fakes';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      prefix: { type: 'string', default: 'loopguard' },
      rate: { type: 'string', default: '1000' },
      runs: { type: 'string', default: '400' },
      seconds: { type: 'string', default: '10' },
      warmup: { type: 'string', default: '2' },
      'wait-budget-ms': { type: 'string', default: '50' },
      'max-events-per-partition': { type: 'string', default: '0' },
    },
  });
  if (!values.brokers) throw new Error('--brokers is required');
  const brokers = values.brokers.split(',').map((s) => s.replace(/^kafka:\/\//, ''));
  const rate = Number(values.rate);
  const runs = Number(values.runs);
  const seconds = Number(values.seconds);
  const warmupMs = Number(values.warmup) * 1000;
  const budget = Number(values['wait-budget-ms']);
  const logger = new CapturingLogger();
  const client = await GatewayClient.connect({
    brokers,
    gatewayId: `bench-ts-${budget}`,
    topicPrefix: values.prefix,
    waitBudgetMs: budget,
    failMode: 'open',
    logger,
    maxEventsPerPartition: Number(values['max-events-per-partition']),
  });
  const latencies: number[] = [];
  /** How late each measured call started against its slot (event loop or CPU starvation). */
  const lateness: number[] = [];
  let calls = 0;
  let measuredCalls = 0;
  const periodMs = (runs / rate) * 1000;
  const start = nowMs() + 200;
  const stopAt = start + warmupMs + seconds * 1000;
  const measureFrom = start + warmupMs;
  let timedOutMeasured = 0;

  async function drive(index: number): Promise<void> {
    const run: GatewayRun = client.startRun({ agentId: 'bench-ts' });
    let next = start + (index / rate) * 1000;
    for (let n = 0; ; n++) {
      await sleep(next - nowMs());
      const t0 = nowMs();
      if (t0 >= stopAt) break;
      const args = { path: `src/file_${index}_${n}.ts`, line: n };
      const verdict = await run.beforeTool('read_file', args);
      const took = nowMs() - t0;
      calls++;
      if (t0 >= measureFrom) {
        latencies.push(took);
        lateness.push(t0 - next);
        measuredCalls++;
        if (verdict.timedOut) timedOutMeasured++;
      }
      if (verdict.allowed) await run.afterTool('read_file', args, { result: { content: `line ${n}` } });
      next += periodMs;
    }
    await run.end();
  }

  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  const cpuBefore = process.cpuUsage();
  loopDelay.enable();
  await Promise.all(Array.from({ length: runs }, (_, i) => drive(i)));
  loopDelay.disable();
  const cpu = process.cpuUsage(cpuBefore);
  const stats = client.stats();
  await client.close();
  const out = {
    client: 'typescript',
    budgetMs: budget,
    rate,
    runs,
    seconds,
    calls,
    measured: measuredCalls,
    achievedRate: measuredCalls / seconds,
    timedOut: timedOutMeasured,
    latenciesMs: latencies,
    latenessMs: lateness,
    eventLoopDelayMs: {
      p50: loopDelay.percentile(50) / 1e6,
      p99: loopDelay.percentile(99) / 1e6,
      max: loopDelay.max / 1e6,
    },
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    stats,
    warnings: logger.at('warn').length,
    warningSamples: [...new Set(logger.at('warn'))].slice(0, 5),
    errors: logger.at('error').slice(0, 5),
  };
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((error) => {
  process.stderr.write(`bench-wait failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
