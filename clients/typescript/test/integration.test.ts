/**
 * Against a real broker. Runs only when told where one is:
 *
 *   LOOPGUARD_TEST_BOOTSTRAP=127.0.0.1:9092   broker to use (required for the first suite)
 *   LOOPGUARD_TEST_TOPIC_PREFIX=loopguard     topics to use (default: a fresh random prefix,
 *                                             whose topics this test creates)
 *   LOOPGUARD_TEST_WORKER=1                   a real loopguard worker serves that prefix: drive a
 *                                             loop and expect its decisions (otherwise a small
 *                                             stand-in worker in this file answers)
 *   LOOPGUARD_TEST_EXPECT_WATERMARKS=1        with a real worker: it publishes RunWatermark too
 *   LOOPGUARD_TEST_WAIT_BUDGET_MS=10000       with watermarks: how long a call waits for the
 *                                             worker (default 10000, the Python suites' budget)
 *   LOOPGUARD_TEST_TANSU=/path/to/tansu       runs the broker-restart test on a tansu of its own
 *
 * e.g. with the project's embedded broker:
 *   tansu broker --listener-url tcp://127.0.0.1:19092 --advertised-listener-url tcp://127.0.0.1:19092
 *   LOOPGUARD_TEST_BOOTSTRAP=127.0.0.1:19092 npm run test:integration
 */

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { after, before, describe, it } from 'node:test';

import { Kafka, Partitioners, type Producer, logLevel } from 'kafkajs';

import {
  type AgentEvent,
  ControlReader,
  type ControlRecord,
  GatewayClient,
  RunAborted,
  type ToolResultEvent,
  decodeEvent,
  encodeDecision,
  encodeEvent,
  encodeWatermark,
  eventSchemaJson,
  ownSchemas,
  topicsFor,
} from '../src';
import { CapturingLogger } from './fakes';

const BOOTSTRAP = process.env.LOOPGUARD_TEST_BOOTSTRAP;
const REAL_WORKER = process.env.LOOPGUARD_TEST_WORKER === '1';
const TANSU = process.env.LOOPGUARD_TEST_TANSU;
const EXPECT_WATERMARKS = process.env.LOOPGUARD_TEST_EXPECT_WATERMARKS === '1';
// A test's budget, not a latency target (those are the benchmarks'): a live worker on a
// saturated CI machine (3 Kafka nodes on 2 cores) has taken over 2 s to answer one call.
const WAIT_BUDGET_MS = Number(process.env.LOOPGUARD_TEST_WAIT_BUDGET_MS ?? 10000);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const quiet = { logLevel: logLevel.NOTHING };

async function ensureTopics(brokers: string[], prefix: string, partitions = 4): Promise<void> {
  const admin = new Kafka({ brokers, clientId: 'loopguard-ts-test-admin', ...quiet }).admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const topics = topicsFor(prefix);
    const wanted = [
      { topic: topics.events, numPartitions: partitions },
      { topic: topics.control, numPartitions: partitions },
      { topic: topics.schemas, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] },
    ].filter((t) => !existing.has(t.topic));
    if (wanted.length) await admin.createTopics({ topics: wanted, waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}

/** Everything on a topic from its beginning, until `done(records)` or the timeout. */
async function readTopic(
  brokers: string[],
  topic: string,
  done: (records: ControlRecord[]) => boolean,
  timeoutMs = 10_000,
): Promise<ControlRecord[]> {
  const records: ControlRecord[] = [];
  const logger = new CapturingLogger();
  const reader = new ControlReader(new Kafka({ brokers, ...quiet }), {
    topic,
    logger: { ...logger, debug: logger.debug, info: logger.info },
    onRecord: (r) => records.push(r),
    fromBeginning: true,
    topicWaitMs: 5000,
  });
  await reader.start();
  try {
    const deadline = Date.now() + timeoutMs;
    while (!done(records) && Date.now() < deadline) await sleep(20);
    return records;
  } finally {
    await reader.stop();
  }
}

/**
 * A stand-in for the loopguard worker: reads the events topic, publishes a RunWatermark after
 * every event, blocks the third identical call in a row and aborts from the fifth on.
 */
class StandInWorker {
  private reader?: ControlReader;
  private producer?: Producer;
  private readonly streak = new Map<string, { args: string; count: number }>();
  private queue: Promise<void> = Promise.resolve();
  readonly seen: AgentEvent[] = [];

  constructor(
    private readonly brokers: string[],
    private readonly prefix: string,
  ) {}

  async start(): Promise<void> {
    const kafka = new Kafka({ brokers: this.brokers, clientId: 'loopguard-ts-test-worker', ...quiet });
    this.producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
    await this.producer.connect();
    const logger = new CapturingLogger();
    this.reader = new ControlReader(kafka, {
      topic: topicsFor(this.prefix).events,
      logger: { ...logger, debug: logger.debug, info: logger.info },
      onRecord: (record) => {
        this.queue = this.queue.then(() => this.handle(record)).catch(() => undefined);
      },
    });
    await this.reader.start();
  }

  private async handle(record: ControlRecord): Promise<void> {
    const event = decodeEvent(record.value as Buffer);
    this.seen.push(event);
    const control = topicsFor(this.prefix).control;
    const messages = [];
    if (event.kind === 'tool_call') {
      const previous = this.streak.get(event.runId);
      const count = previous && previous.args === event.argsJson ? previous.count + 1 : 1;
      this.streak.set(event.runId, { args: event.argsJson, count });
      if (count === 3 || count >= 5) {
        const action = count >= 5 ? 'abort' : 'block';
        messages.push(
          encodeDecision({
            runId: event.runId,
            agentId: event.agentId,
            gatewayId: event.gatewayId,
            seq: Number(event.seq),
            eventTime: Number(event.eventTime),
            action,
            detector: 'stand_in_repeat',
            severity: 'critical',
            count,
            toolName: event.toolName,
            reason: `${event.toolName} called ${count} times with the same arguments`,
          }),
        );
      }
    }
    messages.push(
      encodeWatermark({
        runId: event.runId,
        agentId: event.agentId,
        gatewayId: event.gatewayId,
        seq: Number(event.seq),
        eventTime: Number(event.eventTime),
      }),
    );
    for (const value of messages) {
      await this.producer?.send({ topic: control, messages: [{ key: event.runId, value }] });
    }
  }

  async stop(): Promise<void> {
    await this.reader?.stop();
    await this.queue;
    await this.producer?.disconnect();
  }
}

describe('GatewayClient against a real broker', { skip: !BOOTSTRAP && 'set LOOPGUARD_TEST_BOOTSTRAP' }, () => {
  const brokers = (BOOTSTRAP ?? '').split(',').map((s) => s.replace(/^kafka:\/\//, ''));
  const prefix = process.env.LOOPGUARD_TEST_TOPIC_PREFIX ?? `lgts-${randomBytes(4).toString('hex')}`;
  const topics = topicsFor(prefix);
  let worker: StandInWorker | undefined;
  let client: GatewayClient;
  const logger = new CapturingLogger();

  before(async () => {
    if (!process.env.LOOPGUARD_TEST_TOPIC_PREFIX) await ensureTopics(brokers, prefix);
    if (!REAL_WORKER) {
      worker = new StandInWorker(brokers, prefix);
      await worker.start();
    }
    client = await GatewayClient.connect({
      brokers,
      gatewayId: 'gw-ts-it',
      topicPrefix: prefix,
      // A real worker without watermarks: no waiting (the Python client's behaviour), the
      // loop below paces itself instead.
      waitBudgetMs: REAL_WORKER ? (EXPECT_WATERMARKS ? WAIT_BUDGET_MS : 0) : 1000,
      logger,
    });
  });

  after(async () => {
    await client?.close();
    await worker?.stop();
  });

  it('announces its writer schema on the schemas topic', async () => {
    const key = ownSchemas().AgentEvent.fingerprint.toString('hex');
    const records = await readTopic(brokers, topics.schemas, (rs) => rs.some((r) => r.key?.toString() === key));
    const record = records.find((r) => r.key?.toString() === key);
    assert.ok(record, 'schema record present');
    assert.equal(record.value?.toString('utf8'), eventSchemaJson());
  });

  it('publishes the same bytes as encodeEvent, keyed by run id, in order', async () => {
    const run = client.startRun({ agentId: 'agent-it' });
    await run.beforeTool('exec', { command: 'echo 1' }, 'c1');
    await run.afterTool('exec', { command: 'echo 1' }, { result: { stdout: '1' }, toolCallId: 'c1' });
    await run.end();
    const records = await readTopic(brokers, topics.events, (rs) => rs.filter((r) => r.key?.toString() === run.runId).length >= 4);
    const mine = records.filter((r) => r.key?.toString() === run.runId);
    assert.equal(mine.length, 4);
    assert.equal(new Set(mine.map((r) => r.partition)).size, 1, 'one partition per run');
    mine.forEach((record, i) => {
      assert.ok(record.value?.equals(encodeEvent(run.events[i])), `event ${i + 1} byte for byte`);
    });
  });

  it('enforces a block in time and aborts a run that keeps looping', { skip: REAL_WORKER && 'stand-in worker only' }, async () => {
    const run = client.startRun({ agentId: 'agent-it' });
    const verdicts = [];
    let aborted: RunAborted | undefined;
    for (let i = 0; i < 8 && !aborted; i++) {
      try {
        const verdict = await run.beforeTool('read', { path: '/same' });
        verdicts.push(verdict);
        if (verdict.allowed) await run.afterTool('read', { path: '/same' }, { result: 'same' });
      } catch (error) {
        if (!(error instanceof RunAborted)) throw error;
        aborted = error;
      }
    }
    // calls 1-3 run (the block comes with call 3's seq), call 4 is refused, call 5 draws the abort.
    assert.deepEqual(verdicts.map((v) => v.allowed), [true, true, true, false, true]);
    assert.ok(verdicts.every((v) => !v.timedOut), 'every verdict came in time');
    assert.equal(verdicts[3].blockedBy?.detector, 'stand_in_repeat');
    assert.ok(aborted, 'the sixth call throws RunAborted');
    const veto = run.events.find((e) => e.kind === 'tool_result' && e.resultJson?.includes('tool-loop')) as ToolResultEvent;
    assert.equal(veto.resultJson, '{"details": {"status": "blocked", "deniedReason": "tool-loop"}}');
    // The abort ended the last wait early; the watermark of the run's last event follows.
    const deadline = Date.now() + 5000;
    while (client.watermark(run.runId) < run.seq && Date.now() < deadline) await sleep(10);
    assert.equal(client.watermark(run.runId), run.seq);
  });

  it('skips junk on the control topic', { skip: REAL_WORKER && 'stand-in worker only' }, async () => {
    const before = client.stats().skippedControl;
    const kafka = new Kafka({ brokers, ...quiet });
    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    await producer.send({ topic: topics.control, messages: [{ key: 'x', value: 'not avro' }] });
    await producer.disconnect();
    const deadline = Date.now() + 5000;
    while (client.stats().skippedControl === before && Date.now() < deadline) await sleep(20);
    assert.equal(client.stats().skippedControl, before + 1);
  });

  it('obeys a real worker', { skip: !REAL_WORKER && 'set LOOPGUARD_TEST_WORKER=1' }, async () => {
    const run = client.startRun({ agentId: 'agent-it' });
    let refused = 0;
    let aborted = false;
    for (let i = 0; i < 80 && !aborted; i++) {
      try {
        const verdict = await run.beforeTool('read', { path: '/same' });
        if (verdict.allowed) await run.afterTool('read', { path: '/same' }, { result: { content: 'same' } });
        else refused++;
      } catch (error) {
        if (!(error instanceof RunAborted)) throw error;
        aborted = true;
      }
      if (!EXPECT_WATERMARKS) await sleep(100);
    }
    await run.end(aborted ? 'aborted' : 'completed');
    const actions = client.decisions(run.runId).map((d) => d.action);
    assert.ok(actions.includes('warn') || actions.includes('block') || actions.includes('abort'), `decisions: ${actions}`);
    assert.ok(refused > 0 || aborted, 'the loop was stopped');
    if (EXPECT_WATERMARKS) {
      assert.ok(client.watermark(run.runId) > 0, 'the worker published watermarks');
      assert.equal(client.stats().waitTimeouts, 0);
    }
  });
});

// -- broker restart -----------------------------------------------------------------------

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

async function waitForPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`port ${port} not open`);
    await sleep(50);
  }
}

class Tansu {
  private process?: ChildProcess;
  constructor(
    readonly binary: string,
    readonly port: number,
  ) {}

  async start(): Promise<void> {
    const listener = `tcp://127.0.0.1:${this.port}`;
    this.process = spawn(
      this.binary,
      ['broker', '--listener-url', listener, '--advertised-listener-url', listener, '--storage-engine', 'memory://tansu/'],
      { stdio: 'ignore' },
    );
    await waitForPort(this.port);
  }

  async kill(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }
}

describe('GatewayClient across a broker restart', { skip: !TANSU && 'set LOOPGUARD_TEST_TANSU' }, () => {
  it('keeps publishing and hearing decisions after the broker comes back', async () => {
    const port = await freePort();
    const tansu = new Tansu(TANSU as string, port);
    const brokers = [`127.0.0.1:${port}`];
    const prefix = `lgrs-${randomBytes(4).toString('hex')}`;
    const logger = new CapturingLogger();
    await tansu.start();
    let client: GatewayClient | undefined;
    let worker: StandInWorker | undefined;
    try {
      await ensureTopics(brokers, prefix);
      client = await GatewayClient.connect({
        brokers,
        gatewayId: 'gw-restart',
        topicPrefix: prefix,
        waitBudgetMs: 50,
        logger,
        kafka: { retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 500 } },
      });
      // Some control traffic first, so the client's positions are past 0 when the broker
      // comes back empty (memory storage): it must notice and read the new log from its start.
      // Enough of it that the new log cannot catch up before the client reconnects (with 3
      // cycles, a reconnect slowed by load found the new log already past its old position).
      const firstWorker = new StandInWorker(brokers, prefix);
      await firstWorker.start();
      const run = client.startRun({ agentId: 'agent' });
      for (let i = 0; i < 40; i++) {
        await run.beforeTool('exec', { n: i });
        await run.afterTool('exec', { n: i }, { result: i });
      }
      await client.flush();
      assert.equal(client.stats().publishErrors, 0);
      const deadline0 = Date.now() + 5000;
      while (client.watermark(run.runId) < run.seq && Date.now() < deadline0) await sleep(20);
      assert.equal(client.watermark(run.runId), run.seq);

      await tansu.kill();
      await firstWorker.stop().catch(() => undefined);
      // While the broker is down: nothing throws, failures are counted, calls fail open.
      for (let i = 10; i <= 12; i++) {
        const verdict = await run.beforeTool('exec', { n: i });
        assert.equal(verdict.allowed, true);
      }
      await client.flush(15_000);
      assert.ok(client.stats().publishErrors > 0, 'failed sends are counted');

      await tansu.start(); // memory storage: a new, empty broker on the same port
      await ensureTopics(brokers, prefix); // as the workers would
      worker = new StandInWorker(brokers, prefix);
      await worker.start();

      const second = client.startRun({ agentId: 'agent' });
      const deadline = Date.now() + 30_000;
      let refused = false;
      while (!refused && Date.now() < deadline) {
        try {
          const verdict = await second.beforeTool('read', { path: '/same' });
          if (verdict.allowed) await second.afterTool('read', { path: '/same' }, { result: 'same' });
          else refused = true;
        } catch (error) {
          // Under load the block can come later than the 50 ms budget waited for it (the call
          // fails open) and the run's abort is the first verdict it meets: a refusal too.
          if (!(error instanceof RunAborted)) throw error;
          refused = true;
        }
        await sleep(50);
      }
      assert.ok(refused, 'a block or abort published after the restart reached the client');
      assert.ok(client.stats().controlReconnects >= 1);
      assert.ok(worker.seen.some((e) => e.runId === second.runId), 'events reached the new broker');
      assert.ok(
        logger.at('warn').some((m) => m.includes('lost or truncated') || m.includes('out of range')),
        'the client noticed the new, shorter log',
      );
    } finally {
      await client?.close();
      await worker?.stop();
      await tansu.kill();
    }
  });
});
