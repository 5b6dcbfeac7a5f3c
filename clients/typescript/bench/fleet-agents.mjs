/**
 * The TypeScript leg of bench/fleet_bench.py: a fleet of simulated agents in this one Node
 * process, through one real GatewayClient (the built dist/, no build step of its own).
 *
 *   node clients/typescript/bench/fleet-agents.mjs --brokers 127.0.0.1:9092 [--prefix loopguard]
 *       [--agents 1000] [--seconds 60] [--warmup 10] [--think-median 1.5] [--think-sigma 0.8]
 *       [--back-to-back 0.2] [--looping 0.05] [--run-calls 30] [--budget-ms 50] [--seed 1]
 *       [--fetch-max-wait-ms 20] [--max-events-per-partition 0]
 *
 * The same agents as the Python leg: each one starts after a uniform delay in [0, 2 x median],
 * then runs tool cycles (beforeTool, which waits up to the budget for the run's watermark, then
 * afterTool), thinking between calls a lognormal time (median --think-median s, shape
 * --think-sigma) or, for a share --back-to-back of calls, not at all. A share --looping of the
 * agents (the same ones as in the Python leg) repeat one call with one result until the gateway
 * refuses a call or aborts the run, then start a new run; the others start a new run after
 * --run-calls calls. The random stream is this file's (seeded per agent), not Python's: the same
 * distribution, not the same draws.
 *
 * Stdout, one JSON object a line: {"event": "measuring"} when the warmup ends, {"event":
 * "stopped"} when the measured time is over (the caller samples the worker's CPU at both), then
 * {"event": "report", ...}: the raw samples in ms (decisionMs, watermarkMs, waitMs) over what was
 * published or called after the warmup, the calls and wait timeouts counted, and every looping
 * run's events as hex single-object messages with the call the gateway refused (refusedAt, null
 * if none) and the calls that ran (allowed): the caller replays those very events through the
 * in-process core to count the leaked calls. Logs go to stderr.
 *
 * When a run's watermark arrived comes from the client's onWatermark (as the Python client's
 * on_watermark); a batch's RunWatermarks hands over each of its runs at once.
 */

import { createRequire } from 'node:module';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

const require = createRequire(import.meta.url);
const { GatewayClient, RunAborted, encodeEvent } = require('../dist/index.js');

const AGENT_ID = 'fleet-agent';
const now = () => performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
const emit = (object) => process.stdout.write(`${JSON.stringify(object)}\n`);
const round3 = (ms) => Math.round(ms * 1000) / 1000;

function options() {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      prefix: { type: 'string', default: 'loopguard' },
      'gateway-id': { type: 'string', default: 'fleet-gw-ts' },
      agents: { type: 'string', default: '1000' },
      seconds: { type: 'string', default: '60' },
      warmup: { type: 'string', default: '10' },
      'think-median': { type: 'string', default: '1.5' },
      'think-sigma': { type: 'string', default: '0.8' },
      'back-to-back': { type: 'string', default: '0.2' },
      looping: { type: 'string', default: '0.05' },
      'run-calls': { type: 'string', default: '30' },
      'budget-ms': { type: 'string', default: '50' },
      seed: { type: 'string', default: '1' },
      'fetch-max-wait-ms': { type: 'string', default: '20' },
      'max-events-per-partition': { type: 'string', default: '0' },
    },
  });
  if (!values.brokers) throw new Error('--brokers is required');
  const number = (name) => {
    const value = Number(values[name]);
    if (!Number.isFinite(value)) throw new Error(`--${name} must be a number, got ${values[name]}`);
    return value;
  };
  return {
    brokers: values.brokers.split(',').map((s) => s.replace(/^kafka:\/\//, '')),
    prefix: values.prefix,
    gatewayId: values['gateway-id'],
    agents: number('agents'),
    seconds: number('seconds'),
    warmup: number('warmup'),
    thinkMedian: number('think-median'),
    thinkSigma: number('think-sigma'),
    backToBack: number('back-to-back'),
    looping: number('looping'),
    runCalls: number('run-calls'),
    budgetMs: number('budget-ms'),
    seed: number('seed'),
    fetchMaxWaitMs: number('fetch-max-wait-ms'),
    maxEventsPerPartition: number('max-events-per-partition'),
  };
}

/** mulberry32: a small seeded generator of uniform numbers in [0, 1). */
function seeded(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal draw (Box-Muller). */
function gauss(random) {
  const u = 1 - random(); // (0, 1]: log(u) is finite
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** What the agents and the client's callbacks record (one event loop: no locks). */
class Measurements {
  constructor() {
    this.measureFrom = Infinity;
    this.published = new Map(); // "run\0seq" -> when it was published
    this.pending = new Map(); // run -> seqs published after the warmup, not yet covered
    this.decisionMs = [];
    this.watermarkMs = [];
    this.waitMs = [];
    this.timeouts = 0;
    this.calls = 0;
    this.loopingRuns = [];
  }

  onPublish(run) {
    const t = now();
    if (t < this.measureFrom) return;
    this.published.set(`${run.runId}\u0000${run.seq}`, t);
    const seqs = this.pending.get(run.runId);
    if (seqs) seqs.push(run.seq);
    else this.pending.set(run.runId, [run.seq]);
  }

  onDecision(decision) {
    const sent = this.published.get(`${decision.runId}\u0000${decision.seq}`);
    if (sent !== undefined) this.decisionMs.push(round3(now() - sent));
  }

  /** Every event of the run up to `mark.seq` is now decided, in the gateway's view. */
  onWatermark(mark, at) {
    const seqs = this.pending.get(mark.runId);
    while (seqs?.length && seqs[0] <= mark.seq) {
      const key = `${mark.runId}\u0000${seqs.shift()}`;
      this.watermarkMs.push(round3(at - this.published.get(key)));
      this.published.delete(key);
    }
    if (seqs && !seqs.length) this.pending.delete(mark.runId);
  }

  onCall(started, took, timedOut) {
    if (started < this.measureFrom) return;
    this.calls++;
    this.waitMs.push(round3(took));
    if (timedOut) this.timeouts++;
  }
}

function nextCall(index, looping, n) {
  if (looping) return ['exec', { command: 'make test' }, { exit: 1, out: 'same failure' }];
  return ['read_file', { path: `src/a${index}/f${n}.py` }, { text: `line ${n}` }];
}

async function main() {
  const opts = options();
  const m = new Measurements();
  let warnings = 0;
  const errors = [];
  const logger = {
    warn: (message) => {
      if (warnings++ < 5) process.stderr.write(`warn: ${message}\n`);
    },
    error: (message) => {
      if (errors.length < 5) errors.push(String(message));
      process.stderr.write(`error: ${message}\n`);
    },
  };
  const client = await GatewayClient.connect({
    brokers: opts.brokers,
    gatewayId: opts.gatewayId,
    topicPrefix: opts.prefix,
    waitBudgetMs: opts.budgetMs,
    failMode: 'open',
    logger,
    fetchMaxWaitMs: opts.fetchMaxWaitMs,
    maxEventsPerPartition: opts.maxEventsPerPartition,
    onDecision: (decision) => m.onDecision(decision),
    onWatermark: (mark) => m.onWatermark(mark, now()),
  });
  const start = now();
  m.measureFrom = start + opts.warmup * 1000;
  const stopAt = m.measureFrom + opts.seconds * 1000;
  const mu = Math.log(opts.thinkMedian);

  /** Wait one think time; false when the bench is over. */
  async function think(random) {
    if (random() < opts.backToBack) return now() < stopAt;
    const delay = Math.exp(mu + opts.thinkSigma * gauss(random)) * 1000;
    const left = stopAt - now();
    if (delay >= left) {
      await sleep(left);
      return false;
    }
    await sleep(delay);
    return true;
  }

  async function oneRun(index, looping, runs, random) {
    const run = client.startRun({ agentId: AGENT_ID, runId: `ts-a${index}-r${runs}` });
    m.onPublish(run);
    let attempts = 0;
    let refusedAt = null;
    const limit = looping ? Infinity : opts.runCalls;
    while (attempts < limit && (await think(random))) {
      attempts++;
      const [tool, args, result] = nextCall(index, looping, attempts);
      const started = now();
      let verdict;
      try {
        verdict = await run.beforeTool(tool, args);
      } catch (error) {
        if (!(error instanceof RunAborted)) throw error;
        refusedAt = attempts;
        m.onCall(started, now() - started, false);
        break;
      }
      m.onCall(started, now() - started, verdict.timedOut);
      m.onPublish(run);
      if (!verdict.allowed) {
        refusedAt = attempts;
        break;
      }
      await run.afterTool(tool, args, { result });
      m.onPublish(run);
    }
    if (looping) {
      m.loopingRuns.push({
        runId: run.runId,
        refusedAt,
        allowed: refusedAt === null ? attempts : refusedAt - 1,
        events: run.events.map((event) => encodeEvent(event).toString('hex')),
      });
    }
    await run.end();
  }

  async function agent(index) {
    const random = seeded(opts.seed * 100_003 + index);
    // floor(N x share) of N agents, evenly spread: the same ones as in the Python leg
    const looping = Math.floor((index + 1) * opts.looping) > Math.floor(index * opts.looping);
    // Spread the start over one median think time, as a fleet does not start in step.
    await sleep(random() * 2 * opts.thinkMedian * 1000);
    for (let runs = 1; now() < stopAt; runs++) await oneRun(index, looping, runs, random);
  }

  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();
  let cpuAtMeasuring = null;
  let cpuSeconds = null;
  const markMeasuring = () => {
    if (cpuAtMeasuring !== null) return;
    cpuAtMeasuring = process.cpuUsage();
    emit({ event: 'measuring' });
  };
  const markStopped = () => {
    if (cpuSeconds !== null) return;
    markMeasuring();
    const cpu = process.cpuUsage(cpuAtMeasuring);
    cpuSeconds = (cpu.user + cpu.system) / 1e6;
    emit({ event: 'stopped' });
  };
  const measuring = setTimeout(markMeasuring, m.measureFrom - now());
  const stopped = setTimeout(markStopped, stopAt - now());
  await Promise.all(Array.from({ length: opts.agents }, (_, i) => agent(i)));
  clearTimeout(measuring);
  clearTimeout(stopped);
  markStopped();
  await sleep(1000); // the last decisions in flight
  loopDelay.disable();
  const stats = client.stats();
  await client.close();
  emit({
    event: 'report',
    client: 'typescript',
    calls: m.calls,
    timeouts: m.timeouts,
    waitMs: m.waitMs,
    decisionMs: m.decisionMs,
    watermarkMs: m.watermarkMs,
    loopingRuns: m.loopingRuns,
    cpuSeconds,
    // How late the event loop ran a 10 ms timer (the histogram holds the whole interval).
    eventLoopDelayMs: {
      p50: Math.max(0, loopDelay.percentile(50) / 1e6 - 10),
      p99: Math.max(0, loopDelay.percentile(99) / 1e6 - 10),
      max: Math.max(0, loopDelay.max / 1e6 - 10),
    },
    stats,
    warnings,
    errors,
  });
}

main().catch((error) => {
  process.stderr.write(`fleet-agents failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
