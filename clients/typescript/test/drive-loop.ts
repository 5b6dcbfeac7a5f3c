/**
 * Drives one looping agent run through GatewayClient against a real loopguard worker and prints
 * what happened as one JSON line on stdout (logs go to stderr). Driven by
 * tests/integration/test_typescript_client.py, which checks the verdicts against the pure core.
 *
 *   node build/test/drive-loop.js --brokers 127.0.0.1:9092 --prefix loopguard \
 *       [--wait-budget-ms 10000] [--max-calls 60] [--junk-after 5] [--session-id S]
 *
 * The agent repeats one no-progress call (`read {"path": "/same"}`) and obeys every verdict:
 * a refused call is not run, RunAborted ends the run with status "aborted". After call
 * `--junk-after` it publishes malformed messages to the control topic, keyed by the run id (so
 * they sit in the partition that carries the run's later decisions and watermarks); the client
 * must skip them with a warning and keep enforcing in time.
 *
 * Output: runId; events and decisions as hex single-object messages (the decisions re-encoded
 * from what the client decoded, byte for byte the worker's); one record per call with the seq
 * published before it, the verdict, and how long beforeTool took; the client's stats; its
 * warnings.
 */

import { parseArgs } from 'node:util';

import { Kafka, Partitioners, logLevel } from 'kafkajs';

import { type Decision, GatewayClient, RunAborted, encodeDecision, encodeEvent } from '../src';
import { CapturingLogger } from './fakes';

interface CallRecord {
  call: number;
  /** The run's seq when beforeTool was called (its verdict covers decisions up to here). */
  seqBefore: number;
  allowed: boolean;
  timedOut: boolean;
  waitMs: number;
  warnings: string[];
  blockedBy: string | null;
  aborted: string | null;
  reason: string | null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function publishJunk(brokers: string[], topic: string, runId: string): Promise<string[]> {
  const truncatedDecision = encodeDecision({
    runId,
    agentId: 'agent-ts',
    gatewayId: 'gw-ts-it',
    seq: 1,
    eventTime: Date.now(),
    action: 'abort', // never decoded: cut short, it must not abort anything
    detector: 'junk',
    severity: 'critical',
    count: 1,
    toolName: 'read',
    reason: 'truncated',
  }).subarray(0, -3);
  const junk = [
    Buffer.from('not avro at all', 'utf8'),
    truncatedDecision,
    Buffer.concat([Buffer.from([0xc3, 0x01]), Buffer.alloc(8, 0xff), Buffer.from('unknown schema')]),
  ];
  const kafka = new Kafka({ brokers, clientId: 'loopguard-ts-junk', logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    for (const value of junk) {
      await producer.send({ topic, acks: -1, messages: [{ key: runId, value }] });
    }
  } finally {
    await producer.disconnect();
  }
  return junk.map((b) => b.toString('hex'));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      prefix: { type: 'string', default: 'loopguard' },
      'wait-budget-ms': { type: 'string', default: '10000' },
      'max-calls': { type: 'string', default: '60' },
      'junk-after': { type: 'string', default: '5' },
      'session-id': { type: 'string', default: '' },
    },
  });
  if (!values.brokers) throw new Error('--brokers is required');
  const brokers = values.brokers.split(',').map((s) => s.replace(/^kafka:\/\//, ''));
  const maxCalls = Number(values['max-calls']);
  const junkAfter = Number(values['junk-after']);
  const logger = new CapturingLogger();
  const client = await GatewayClient.connect({
    brokers,
    gatewayId: 'gw-ts-it',
    topicPrefix: values.prefix,
    waitBudgetMs: Number(values['wait-budget-ms']),
    failMode: 'open',
    logger,
  });
  const id = (d: Decision) => d.decisionId;
  const calls: CallRecord[] = [];
  let junk: string[] = [];
  // with --session-id the run belongs to that session (its events are keyed by it)
  const run = client.startRun({ agentId: 'agent-ts', sessionId: values['session-id'] || null });
  const args = { path: '/same' };
  let aborted = false;
  try {
    for (let call = 0; call < maxCalls && !aborted; call++) {
      if (call === junkAfter) junk = await publishJunk(brokers, client.topics.control, run.runId);
      const seqBefore = run.seq;
      const started = process.hrtime.bigint();
      try {
        const verdict = await run.beforeTool('read', args, `call-${call}`);
        const waitMs = Number(process.hrtime.bigint() - started) / 1e6;
        calls.push({
          call,
          seqBefore,
          allowed: verdict.allowed,
          timedOut: verdict.timedOut,
          waitMs,
          warnings: verdict.warnings.map(id),
          blockedBy: verdict.blockedBy ? id(verdict.blockedBy) : null,
          aborted: null,
          reason: verdict.reason ?? null,
        });
        if (verdict.allowed) {
          await run.afterTool('read', args, { result: { content: 'same' }, toolCallId: `call-${call}` });
        }
      } catch (error) {
        if (!(error instanceof RunAborted)) throw error;
        const waitMs = Number(process.hrtime.bigint() - started) / 1e6;
        calls.push({
          call,
          seqBefore,
          allowed: false,
          timedOut: false,
          waitMs,
          warnings: [],
          blockedBy: null,
          aborted: id(error.decision),
          reason: error.message,
        });
        aborted = true;
      }
    }
    await run.end(aborted ? 'aborted' : 'completed');
    // Decisions drawn by the last events arrive before the watermark of RunEnded.
    const deadline = Date.now() + 30_000;
    while (client.watermark(run.runId) < run.seq && Date.now() < deadline) await sleep(20);
  } finally {
    await client.close();
  }
  const out = {
    runId: run.runId,
    aborted,
    watermark: client.watermark(run.runId),
    events: run.events.map((e) => encodeEvent(e).toString('hex')),
    decisions: client.decisions(run.runId).map((d) => encodeDecision(d).toString('hex')),
    calls,
    junk,
    stats: client.stats(),
    warnings: logger.at('warn'),
  };
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((error) => {
  process.stderr.write(`drive-loop failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
