/**
 * Gateway side of loopguard: publish a run's tool events, obey the control topic. The
 * TypeScript twin of Python's `streams/gateway_client.py` (`GatewayClient` / `GatewayRun`).
 *
 * ```ts
 * const client = await GatewayClient.connect({ brokers: ['127.0.0.1:9092'], gatewayId: 'gw-1' });
 * const run = client.startRun({ agentId: 'support-bot' });
 * const verdict = await run.beforeTool('exec', { command: 'make test' }); // throws RunAborted
 * if (verdict.allowed) {
 *   const result = await execute();
 *   await run.afterTool('exec', { command: 'make test' }, { result });
 * }
 * await run.end();
 * ```
 *
 * Enforcement (as in Python): decisions for the run are applied by the next `beforeTool`:
 * warnings are handed over once; a block refuses exactly that next cycle and is published as
 * the call's outcome (`{"details": {"status": "blocked", "deniedReason": "tool-loop"}}`, so the
 * worker's no-progress streak keeps counting); an abort throws {@link RunAborted} from then on.
 * An observe-only decision (`enforced: false`, the agent's config is `mode: "observe"`) is
 * logged once per decision id ("would block ...") and never refuses or aborts anything.
 *
 * In time (new): before deciding, `beforeTool` waits up to `waitBudgetMs` for the run's
 * RunWatermark to reach the seq of the last event the run published, so a verdict on the
 * previous cycle is not missed because it was still on its way. The first call of a run does
 * not wait (only RunStarted was published, and it never draws a decision). On timeout,
 * `failMode` 'open' lets the call run (counted in `stats().waitTimeouts`, logged), 'closed'
 * refuses it like a block, with `reason` saying loopguard did not answer.
 *
 * Sends are batched (issue 24): one produce request in flight, the next carrying every event
 * queued meanwhile, no linger timer; a run's events keep their order. A model turn's usage
 * (`run.reportUsage`, issue 28) rides on the run's next tool call or its end.
 */

import { randomUUID } from 'node:crypto';

import { Kafka, type KafkaConfig, type PartitionMetadata, Partitioners, type Producer, logLevel } from 'kafkajs';

import { parseBrokers } from './brokers';
import { decisionIdOf, decodeControl, encodeEvent } from './codec';
import { ControlReader, type ControlRecord } from './controlReader';
import { CodecError } from './errors';
import {
  ABORT_DETECTOR,
  DEFAULT_ANSWER_WAIT_MS,
  DEFAULT_RELEASE_CALLS,
  RELEASE_DETECTOR,
  type HoldSettings,
  encodeOperatorCommand,
  holdSettings,
  operatorAnswer,
} from './hold';
import { type Logger, RateLimitedLog, defaultLogger, safeLogger } from './logger';
import { modelNote, modelNotes } from './modelNotes';
import { pyJsonDumps } from './pyjson';
import { eventSchemaJson, ownSchemas } from './schemas';
import { KeyRing, type RecordHeaders, keysFromEnv } from './signing';
import type { AgentEvent, AgentEventInput, Decision, RunWatermark, TurnUsage } from './types';

/** The outcome published for a call loopguard blocked (the worker recognises it as its veto). */
export const LOOP_VETO_RESULT = { details: { status: 'blocked', deniedReason: 'tool-loop' } } as const;
/** The outcome published for a call refused because loopguard did not answer in time (failMode 'closed'). */
export const GUARD_TIMEOUT_RESULT = { details: { status: 'blocked', deniedReason: 'guard-timeout' } } as const;

export type FailMode = 'open' | 'closed';

export interface Topics {
  events: string;
  control: string;
  schemas: string;
}

/** `<prefix>.events`, `<prefix>.control`, `<prefix>.schemas` (Python's `Topics.with_prefix`). */
export function topicsFor(prefix = 'loopguard'): Topics {
  return { events: `${prefix}.events`, control: `${prefix}.control`, schemas: `${prefix}.schemas` };
}

export interface GatewayClientOptions {
  /** `host:port` or `kafka://host:port` (a missing port is 9092): a list, or one string separated by commas. */
  brokers: string | string[];
  gatewayId: string;
  /** Topic name prefix (default "loopguard"). */
  topicPrefix?: string;
  /** How long `beforeTool` waits for the worker to catch up with the run (default 50 ms; 0: never wait). */
  waitBudgetMs?: number;
  /** What `beforeTool` does when the wait times out (default 'open'). */
  failMode?: FailMode;
  logger?: Logger;
  /** Extra kafkajs client settings (ssl, sasl, clientId, retry, connectionTimeout, logLevel, ...). */
  kafka?: Partial<KafkaConfig>;
  /** Called for every new decision of this client's runs (after deduplication). */
  onDecision?: (decision: Decision) => void;
  /** Called for every watermark of this client's runs as it arrives (how far the worker got; benchmarks). */
  onWatermark?: (watermark: RunWatermark) => void;
  /** Fetch wait of the control reader (default 20 ms: tansu holds an empty fetch for all of it). */
  fetchMaxWaitMs?: number;
  /** How long `connect` waits for the control topic to exist (default 30 s, as Python). */
  controlTopicWaitMs?: number;
  /** Upper bound for `run.end()` / `close()` waiting for unsent events (default 10 s). */
  flushTimeoutMs?: number;
  /** How many ended runs keep their decisions for `decisions(runId)` (default 1000). */
  endedRunsKept?: number;
  /** Event time source, epoch ms (default `Date.now`; tests and vector files fix it). */
  clock?: () => number;
  /** Events waiting to be sent (broker away) beyond which new ones are dropped and counted (default 10000). */
  maxPendingSends?: number;
  /**
   * Events one produce request carries at most (default 1000). Events are sent in batches: one
   * request at a time, carrying every event queued while the previous one was in flight (no
   * linger timer: an event waits only for the request before it).
   */
  maxBatchEvents?: number;
  /**
   * Produce requests in flight at once (default 5, as Kafka's max.in.flight per connection). A
   * run's next event waits until the request holding its previous one is answered, so its
   * events stay in order; other runs' events go in the next free request.
   */
  maxInFlightRequests?: number;
  /**
   * Events of one partition a request carries at most (default: no limit). tansu reports a
   * partition's end as the first offset of its last record batch + 1, so on tansu pass 1: each
   * request then carries one event per partition (still one request for many runs).
   */
  maxEventsPerPartition?: number;
  /**
   * This gateway's own signing keys (issue 40): `{keyId: secret}` or `keyId:secret[,...]`, the
   * signing key first (default: `LOOPGUARD_GATEWAY_KEY`, none when unset). With keys, every event
   * goes out signed, and only the control records a worker signed for this gateway are obeyed
   * (others of its runs are counted in `stats().forged` and logged).
   */
  signingKeys?: KeyRing | Record<string, string> | string;
}

export interface Verdict {
  allowed: boolean;
  /** Warnings that arrived since the previous call of the run. */
  warnings: Decision[];
  /** The block decision that refused this call. */
  blockedBy?: Decision;
  /**
   * Why the call was refused: the block's note for the model (`warnings: "model"`), else its
   * reason, or that loopguard did not answer.
   */
  reason?: string;
  /**
   * The warnings' notes for the model (issue 43, `warnings: "model"` in the agent's config):
   * attach them to this call's tool result, the next one the model sees, and publish the
   * tool's own result (`afterTool`) without them: a note differs from call to call, so a
   * loop's outcomes would never repeat. Absent when none.
   */
  modelNote?: string;
  /** The wait for the worker ran out (the verdict is the fail mode's). */
  timedOut: boolean;
}

/**
 * What `beforeTool` takes besides the call: the model turn's usage (if not reported already,
 * {@link GatewayRun.reportUsage}) and the turn's id.
 */
export interface BeforeToolOptions extends TurnUsage {
  /**
   * The assistant turn (message) that asked for the call (issue 44): give every parallel call
   * of one turn the same id, and the worker judges them as a set (a turn that repeats the same
   * few calls many times is one loop signal). Leave it out when the runtime does not say.
   */
  turnId?: string | null;
}

export interface AfterToolOptions {
  result?: unknown;
  error?: string | null;
  toolCallId?: string | null;
}

export interface ClientStats {
  published: number;
  publishErrors: number;
  /** Events not even tried because `maxPendingSends` were already waiting. */
  dropped: number;
  pendingSends: number;
  decisions: number;
  duplicates: number;
  watermarks: number;
  /** Control messages skipped because they could not be decoded. */
  skippedControl: number;
  /** Control records about this client's runs that no worker signed for it (with keys): ignored. */
  forged: number;
  /** Decisions/watermarks for runs this client does not know (other gateways' runs). */
  otherRuns: number;
  waits: number;
  waitTimeouts: number;
  warningsDelivered: number;
  blocks: number;
  failClosedRefusals: number;
  aborts: number;
  /** Observe-only decisions (shadow mode) logged and not acted on. */
  observed: number;
  activeRuns: number;
  controlReconnects: number;
  /** Produce requests made for events (each carries a batch: see `maxBatchEvents`). */
  sendRequests: number;
}

/** loopguard aborted the run; the gateway must stop it and report `decision.reason`. */
export class RunAborted extends Error {
  /** What to tell the model as the refused call's result ('' under `warnings: "log"`). */
  readonly modelNote: string;
  constructor(readonly decision: Decision) {
    super(`${decision.errorCode || decision.detector}: ${decision.reason}`);
    this.name = 'RunAborted';
    this.modelNote = modelNote(decision);
  }
}

/** One record of a batch. */
export interface OutRecord {
  key: Buffer;
  value: Buffer;
  /** The event's signature (`loopguard-key`, `loopguard-sig`) when the client has keys. */
  headers?: Record<string, string>;
}

/** How the client reaches Kafka; replaceable for tests. */
export interface Transport {
  /** Publish one record; resolves when acknowledged, rejects on failure. */
  send(topic: string, key: Buffer, value: Buffer, headers?: Record<string, string>): Promise<void>;
  /**
   * Publish records in one request, in order per key; resolves when all are acknowledged,
   * rejects if any failed. Without it the client sends a batch's records one after another.
   */
  sendBatch?(topic: string, records: OutRecord[]): Promise<void>;
  /** The partition a key goes to (for `maxEventsPerPartition`); undefined when not known. */
  partitionOf?(topic: string, key: Buffer): number | undefined;
  /** The topic's partition count, when known (lets a batch stop looking once each is full). */
  partitionCount?(topic: string): number | undefined;
  close(): Promise<void>;
  readonly reconnects?: number;
}

interface Queued extends OutRecord {
  runId: string;
  done: () => void;
  /** The key as text (the in-flight and ordering checks), and its partition once computed. */
  keyText: string;
  partition?: number | string;
}

interface RunControl {
  warnings: Decision[];
  block?: Decision;
  abort?: Decision;
  seen: Set<string>;
  decisions: Decision[];
  watermark: number;
  waiters: Set<() => void>;
  ended: boolean;
}

const newControl = (): RunControl => ({
  warnings: [],
  seen: new Set(),
  decisions: [],
  watermark: 0,
  waiters: new Set(),
  ended: false,
});

export class GatewayClient {
  readonly gatewayId: string;
  readonly topics: Topics;
  readonly waitBudgetMs: number;
  readonly failMode: FailMode;
  /** The Avro schema this client writes with; announced on the schemas topic at start. */
  static get writerSchemaJson(): string {
    return eventSchemaJson();
  }

  private readonly log: Required<Logger>;
  private readonly limited = new RateLimitedLog(60_000);
  /** This gateway's signing keys (issue 40), when it has any. */
  readonly keys: KeyRing | undefined;
  private readonly onDecision?: (decision: Decision) => void;
  private readonly onWatermark?: (watermark: RunWatermark) => void;
  private readonly runs = new Map<string, RunControl>();
  /** agent id + tool -> a block of that agent's next call of that tool (loops between agents). */
  private readonly toolBlocks = new Map<string, Decision>();
  private readonly toolBlocksSeen = new Set<string>();
  private readonly endedOrder: string[] = [];
  private readonly endedRunsKept: number;
  private readonly flushTimeoutMs: number;
  private readonly pending = new Set<Promise<void>>();
  /** Events waiting for the next request, in the order they were handed over. */
  private queue: Queued[] = [];
  private pumpScheduled = false;
  private inFlight = 0;
  /** Keys with an event in a request that has not been answered yet. */
  private readonly inFlightKeys = new Set<string>();
  private readonly maxInFlightRequests: number;
  private readonly maxBatchEvents: number;
  private readonly maxEventsPerPartition: number;
  private closed = false;
  /** @internal */
  readonly clock: () => number;
  private readonly maxPendingSends: number;
  private readonly counters = {
    published: 0,
    publishErrors: 0,
    dropped: 0,
    decisions: 0,
    duplicates: 0,
    watermarks: 0,
    skippedControl: 0,
    forged: 0,
    otherRuns: 0,
    waits: 0,
    waitTimeouts: 0,
    warningsDelivered: 0,
    blocks: 0,
    failClosedRefusals: 0,
    aborts: 0,
    observed: 0,
    sendRequests: 0,
  };

  /**
   * Connect to Kafka: producer up, every control partition assigned at its end, writer schema
   * announced. Rejects with a {@link BrokerAddressError} for a malformed address (before
   * connecting), or if the brokers cannot be reached or the control topic does not appear
   * within `controlTopicWaitMs`; after that, nothing the client does throws on broker trouble.
   */
  static async connect(options: GatewayClientOptions): Promise<GatewayClient> {
    const logger = safeLogger(options.logger ?? defaultLogger);
    const topics = topicsFor(options.topicPrefix);
    const transport = new KafkaTransport(options, topics, logger);
    const client = new GatewayClient(options, transport, logger);
    try {
      await transport.start((record) =>
        client.ingestControl(record.value, `${topics.control}[${record.partition}]@${record.offset}`, record.headers),
      );
      await client.publishSchema();
    } catch (error) {
      await transport.close().catch(() => undefined);
      throw error;
    }
    return client;
  }

  /** A client on any {@link Transport} (tests, tools); feed control messages to {@link ingestControl}. */
  static withTransport(options: Omit<GatewayClientOptions, 'brokers'> & { brokers?: string | string[] }, transport: Transport): GatewayClient {
    return new GatewayClient(options, transport, safeLogger(options.logger ?? defaultLogger));
  }

  private constructor(
    options: Omit<GatewayClientOptions, 'brokers'>,
    private readonly transport: Transport,
    logger: Required<Logger>,
  ) {
    if (!options.gatewayId) throw new TypeError('gatewayId is required');
    this.gatewayId = options.gatewayId;
    this.topics = topicsFor(options.topicPrefix);
    this.waitBudgetMs = Math.max(0, options.waitBudgetMs ?? 50);
    this.failMode = options.failMode ?? 'open';
    if (this.failMode !== 'open' && this.failMode !== 'closed') throw new TypeError(`failMode must be 'open' or 'closed'`);
    this.onDecision = options.onDecision;
    this.onWatermark = options.onWatermark;
    this.log = logger;
    this.flushTimeoutMs = options.flushTimeoutMs ?? 10_000;
    this.endedRunsKept = options.endedRunsKept ?? 1000;
    this.clock = options.clock ?? Date.now;
    this.maxPendingSends = options.maxPendingSends ?? 10_000;
    this.maxBatchEvents = Math.max(1, options.maxBatchEvents ?? 1000);
    this.maxInFlightRequests = Math.max(1, options.maxInFlightRequests ?? 5);
    this.maxEventsPerPartition = Math.max(0, options.maxEventsPerPartition ?? 0);
    this.keys = options.signingKeys === undefined ? keysFromEnv() : KeyRing.of(options.signingKeys);
  }

  // -- runs -------------------------------------------------------------------------

  /**
   * Start a run: publishes RunStarted. `runId` defaults to a random 32-hex id. `sessionId`
   * names the conversation the run belongs to: every event of the run carries it and is keyed
   * by it (a session's runs share a partition), and `scope: "session"` carries a loop's counts
   * over to the session's next run. `trigger` says what started the run ("user", "heartbeat",
   * "cron", "compaction", ...); heartbeat and cron runs start fresh by default.
   */
  startRun(options: { agentId: string; runId?: string; sessionId?: string | null; trigger?: string | null }): GatewayRun {
    const runId = options.runId || randomUUID().replace(/-/g, '');
    if (this.runs.has(runId) && !this.runs.get(runId)?.ended) throw new Error(`run ${runId} is already active`);
    this.runs.set(runId, newControl());
    const run = new GatewayRun(this, runId, options.agentId, options.sessionId || null);
    run.emit(options.trigger ? { kind: 'run_started', trigger: options.trigger } : { kind: 'run_started' });
    return run;
  }

  /** Every decision received for the run, in arrival order (deduplicated). */
  decisions(runId: string): Decision[] {
    return [...(this.runs.get(runId)?.decisions ?? [])];
  }

  /** Highest seq of the run the worker reported as processed (0: none yet). */
  watermark(runId: string): number {
    return this.runs.get(runId)?.watermark ?? 0;
  }

  /** Resolve when `predicate(decisions)` holds for the run (tests, demo, tooling). */
  async waitFor(runId: string, predicate: (decisions: Decision[]) => boolean, timeoutMs = 10_000): Promise<Decision[]> {
    const control = this.runs.get(runId);
    if (!control) throw new Error(`run ${runId} is not a run of this client`);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const decisions = [...control.decisions];
      if (predicate(decisions)) return decisions;
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        throw new Error(`run ${runId}: condition not met in ${timeoutMs} ms (${decisions.length} seen)`);
      }
      await this.nextChange(control, remaining);
    }
  }

  stats(): ClientStats {
    let activeRuns = 0;
    for (const control of this.runs.values()) if (!control.ended) activeRuns++;
    return {
      ...this.counters,
      pendingSends: this.pending.size,
      activeRuns,
      controlReconnects: this.transport.reconnects ?? 0,
    };
  }

  /** Wait until every event handed to the client so far is acknowledged (or failed). */
  async flush(timeoutMs = this.flushTimeoutMs): Promise<boolean> {
    const all = Promise.allSettled([...this.pending]).then(() => true);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const done = await Promise.race([all, timeout]);
    clearTimeout(timer);
    if (!done) this.log.warn(`${this.pending.size} event(s) still unsent after ${timeoutMs} ms`);
    return done;
  }

  /** Flush (bounded), stop reading the control topic, disconnect. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.flush();
    await this.transport.close().catch((error) => this.log.warn(`closing the Kafka connections failed: ${String(error)}`));
    for (const control of this.runs.values()) this.wakeAll(control);
  }

  // -- control topic ----------------------------------------------------------------

  /**
   * Handle one control-topic message (a Decision, a RunWatermark, or a batch's RunWatermarks,
   * each of whose watermarks counts as one RunWatermark would). Undecodable messages are
   * skipped with a warning; nothing here throws.
   */
  ingestControl(value: Buffer | null, where = 'control message', headers?: RecordHeaders): void {
    let message;
    try {
      if (value === null) throw new CodecError('empty (tombstone) message');
      message = decodeControl(value);
    } catch (error) {
      this.counters.skippedControl++;
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      const suppressed = this.limited.allow(`skip:${text}`);
      if (suppressed >= 0) {
        this.log.warn(
          `skipping undecodable control message (${where}): ${text}` +
            (suppressed > 0 ? ` (${suppressed} more like it not logged)` : ''),
        );
      }
      return;
    }
    if (this.keys && value) {
      const refused = this.keys.check(headers, value);
      if (refused) return this.refuse(message, refused, where);
    }
    if (message.type === 'watermark') this.applyWatermark(message.watermark);
    else if (message.type === 'watermarks') for (const watermark of message.watermarks) this.applyWatermark(watermark);
    else this.applyDecision(message.decision);
  }

  /**
   * A control record no worker signed for this gateway (issue 40): another gateway's (counted in
   * `otherRuns`), or, when it names a run of this client's, forged (`forged`, logged).
   */
  private refuse(message: ReturnType<typeof decodeControl>, why: string, where: string): void {
    const runIds =
      message.type === 'watermark'
        ? [message.watermark.runId]
        : message.type === 'watermarks'
          ? message.watermarks.map((mark) => mark.runId)
          : [message.decision.runId];
    const ours = runIds.find((runId) => this.runs.has(runId));
    if (ours === undefined) {
      this.counters.otherRuns++;
      return;
    }
    this.counters.forged++;
    const suppressed = this.limited.allow('forged');
    if (suppressed >= 0) {
      this.log.warn(
        `ignoring a control record for run ${ours} that no worker signed for this gateway (${why}, ${where})` +
          (suppressed > 0 ? ` (${suppressed} more not logged)` : ''),
      );
    }
  }

  private applyWatermark(watermark: RunWatermark): void {
    const control = this.runs.get(watermark.runId);
    if (!control) {
      this.counters.otherRuns++;
      return;
    }
    this.counters.watermarks++;
    if (watermark.seq > control.watermark) {
      control.watermark = watermark.seq;
      this.wakeAll(control);
    }
    if (this.onWatermark) {
      try {
        this.onWatermark(watermark);
      } catch (error) {
        this.log.error(`onWatermark callback failed: ${String(error)}`);
      }
    }
  }

  private applyDecision(decision: Decision): void {
    // A block limited to one tool (`extra.only_tool`, agent_cycle): the agent's next call of
    // that tool, in whichever of its runs on this gateway (OpenClaw starts a run per message).
    // Never a block of the run's next call, whatever the tool; another gateway's agents' own.
    const onlyTool = decision.action === 'block' && decision.enforced !== false ? decision.extra?.only_tool : undefined;
    const toolBlock = typeof onlyTool === 'string' && onlyTool !== '';
    if (toolBlock && decision.gatewayId === this.gatewayId) {
      const id = decision.decisionId || decisionIdOf(decision);
      if (!this.toolBlocksSeen.has(id)) {
        this.toolBlocksSeen.add(id);
        this.toolBlocks.set(`${decision.agentId}\u0000${onlyTool}`, decision);
      }
    }
    const control = this.runs.get(decision.runId);
    if (!control) {
      this.counters.otherRuns++;
      return;
    }
    const id = decision.decisionId || decisionIdOf(decision);
    if (control.seen.has(id)) {
      this.counters.duplicates++;
      return; // redelivered after a worker restart: already in effect
    }
    control.seen.add(id);
    control.decisions.push(decision);
    this.counters.decisions++;
    if (decision.enforced === false) this.logObserved(decision); // shadow mode: never acted on
    else if (decision.detector === RELEASE_DETECTOR) {
      control.block = undefined; // an operator released the run (issue 43): its next call goes through
      control.warnings.push(decision);
    } else if (decision.action === 'abort') control.abort = decision;
    else if (decision.action === 'block') {
      if (!toolBlock) control.block = decision;
    } else control.warnings.push(decision);
    this.wakeAll(control);
    if (this.onDecision) {
      try {
        this.onDecision(decision);
      } catch (error) {
        this.log.error(`onDecision callback failed: ${String(error)}`);
      }
    }
  }

  /** One line for an observe-only decision: what enforcing it would have done. */
  private logObserved(decision: Decision): void {
    this.counters.observed++;
    const effect = { warn: 'warn', block: 'block the next tool call', abort: 'abort the run' }[decision.action];
    this.log.warn(
      `run ${decision.runId} (agent ${decision.agentId}): observe only, loopguard would ${effect} ` +
        `at seq ${decision.seq}: ${decision.reason} [${decision.detector}, decision ${decision.decisionId}]`,
    );
  }

  private wakeAll(control: RunControl): void {
    for (const wake of [...control.waiters]) wake();
  }

  /** Resolves on the run's next decision or watermark, or after `ms`. */
  private nextChange(control: RunControl, ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        control.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      control.waiters.add(done);
    });
  }

  // -- used by GatewayRun -----------------------------------------------------------

  /** @internal Wait (bounded) until the worker processed the run up to `seq`; false on timeout. */
  async awaitWatermark(runId: string, seq: number): Promise<boolean> {
    const control = this.runs.get(runId);
    if (!control || this.waitBudgetMs <= 0) return true;
    if (control.watermark >= seq || control.abort) return true;
    this.counters.waits++;
    const deadline = Date.now() + this.waitBudgetMs;
    while (control.watermark < seq && !control.abort && !this.closed) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) return false;
      await this.nextChange(control, remaining);
    }
    return control.watermark >= seq || control.abort !== undefined;
  }

  /** @internal Take the run's pending verdict: throws RunAborted, consumes warnings and the block. */
  takeVerdict(runId: string, toolName = '', agentId = ''): { warnings: Decision[]; block?: Decision } {
    const control = this.runs.get(runId);
    if (!control) return { warnings: [] };
    if (control.abort) {
      this.counters.aborts++;
      throw new RunAborted(control.abort);
    }
    const warnings = control.warnings;
    control.warnings = [];
    let block = control.block;
    control.block = undefined;
    const toolKey = `${agentId}\u0000${toolName}`;
    if (!block && toolName && this.toolBlocks.has(toolKey)) {
      block = this.toolBlocks.get(toolKey);
      this.toolBlocks.delete(toolKey);
    }
    this.counters.warningsDelivered += warnings.length;
    if (block) this.counters.blocks++;
    return { warnings, block };
  }

  /** @internal Publish an operator command of this gateway's (a held call's hold default). */
  publishCommand(runId: string, key: string, value: Buffer): Promise<void> {
    return this.send(runId, value, key);
  }

  /** @internal */
  noteTimeout(runId: string, seq: number, refused: boolean): void {
    this.counters.waitTimeouts++;
    if (refused) this.counters.failClosedRefusals++;
    const suppressed = this.limited.allow('wait-timeout');
    const message =
      `run ${runId}: loopguard did not confirm seq ${seq} within ${this.waitBudgetMs} ms; ` +
      (refused ? 'refusing the call (failMode closed)' : 'allowing the call (failMode open)');
    if (suppressed >= 0) {
      this.log.warn(message + (suppressed > 0 ? ` (${suppressed} more timeouts not logged)` : ''));
    } else {
      this.log.debug(message);
    }
  }

  /**
   * @internal Queue an encoded event under `key` (the run's session id, else its run id) for
   * the next batch; resolves when it is acknowledged or failed (logged and counted), never
   * rejects. Events go out in the order they were queued (per key, which is what the broker
   * keeps), one request at a time: a request in flight collects what arrives meanwhile.
   */
  send(runId: string, value: Buffer, key: string = runId): Promise<void> {
    if (this.pending.size >= this.maxPendingSends) {
      this.counters.dropped++;
      const suppressed = this.limited.allow('dropped');
      if (suppressed >= 0) {
        this.log.error(
          `${this.pending.size} events are waiting to be sent; dropping an event of run ${runId}` +
            (suppressed > 0 ? ` (${suppressed} more dropped)` : ''),
        );
      }
      return Promise.resolve();
    }
    let done!: () => void;
    const sent = new Promise<void>((resolve) => {
      done = resolve;
    });
    const headers = this.keys?.headers(value); // issue 40: the event signed with this gateway's key
    this.queue.push({ runId, key: Buffer.from(key, 'utf8'), value, done, keyText: key, ...(headers ? { headers } : {}) });
    this.pending.add(sent);
    void sent.finally(() => this.pending.delete(sent));
    if (!this.pumpScheduled) {
      this.pumpScheduled = true;
      // A microtask, not a timer: events emitted in the same tick (a refusal's call and its
      // outcome, parallel tool calls) share the first request.
      queueMicrotask(() => {
        this.pumpScheduled = false;
        this.pump();
      });
    }
    return sent;
  }

  /** Start requests for the queued events while fewer than `maxInFlightRequests` are out. */
  private pump(): void {
    while (this.queue.length && this.inFlight < this.maxInFlightRequests) {
      const batch = this.takeBatch();
      if (!batch.length) return; // every queued key waits for a request in flight
      this.inFlight++;
      for (const record of batch) this.inFlightKeys.add(record.keyText);
      void this.request(batch).finally(() => {
        this.inFlight--;
        for (const record of batch) this.inFlightKeys.delete(record.keyText);
        for (const record of batch) record.done();
        this.pump();
      });
    }
  }

  /** One produce request for `batch`; failures are counted and logged, never thrown. */
  private async request(batch: Queued[]): Promise<void> {
    this.counters.sendRequests++;
    try {
      if (this.transport.sendBatch) await this.transport.sendBatch(this.topics.events, batch);
      else for (const record of batch) await this.transport.send(this.topics.events, record.key, record.value, record.headers);
      this.counters.published += batch.length;
    } catch (error) {
      this.counters.publishErrors += batch.length;
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      const suppressed = this.limited.allow(`publish:${text}`);
      if (suppressed >= 0) {
        const runs = [...new Set(batch.map((record) => record.runId))];
        this.log.error(
          `publishing ${batch.length} event(s) of run(s) ${runs.slice(0, 3).join(', ')}${runs.length > 3 ? ', ...' : ''} failed: ${text}` +
            (suppressed > 0 ? ` (${suppressed} more failures not logged)` : ''),
        );
      }
    }
  }

  /**
   * The next request's events: the oldest queued ones whose key has nothing in flight, at most
   * `maxBatchEvents`, and with `maxEventsPerPartition` at most that many of a partition (the
   * rest keep their places, so a run's events still go out in order).
   */
  private takeBatch(): Queued[] {
    const limit = this.maxEventsPerPartition;
    const partitionOf = limit ? this.transport.partitionOf?.bind(this.transport) : undefined;
    const partitions = partitionOf ? this.transport.partitionCount?.(this.topics.events) : undefined;
    const batch: Queued[] = [];
    const rest: Queued[] = [];
    const taken = new Map<number | string, number>();
    let fullPartitions = 0;
    const blockedKeys = new Set<string>();
    const queue = this.queue;
    let index = 0;
    for (; index < queue.length; index++) {
      // Nothing more can join (the batch is full, or every partition is): the rest stays as is.
      if (batch.length >= this.maxBatchEvents || (partitions && fullPartitions >= partitions)) break;
      const record = queue[index];
      const keyText = record.keyText;
      if (partitionOf && record.partition === undefined) {
        record.partition = partitionOf(this.topics.events, record.key) ?? `key:${keyText}`;
      }
      const partition = record.partition ?? 0;
      const count = taken.get(partition) ?? 0;
      if (!blockedKeys.has(keyText) && !this.inFlightKeys.has(keyText) && (!limit || count < limit)) {
        taken.set(partition, count + 1);
        if (limit && count + 1 === limit) fullPartitions++;
        batch.push(record);
      } else {
        blockedKeys.add(keyText); // a key's later events wait behind the one left here
        rest.push(record);
      }
    }
    for (; index < queue.length; index++) rest.push(queue[index]);
    this.queue = rest;
    return batch;
  }

  /** @internal */
  endRun(runId: string): void {
    const control = this.runs.get(runId);
    if (!control || control.ended) return;
    control.ended = true;
    this.endedOrder.push(runId);
    while (this.endedOrder.length > this.endedRunsKept) {
      const old = this.endedOrder.shift();
      if (old !== undefined && this.runs.get(old)?.ended) this.runs.delete(old);
    }
  }

  /** Announce the writer schema on the schemas topic (key = fingerprint hex), as Python's publish_schema. */
  async publishSchema(): Promise<void> {
    const schema = ownSchemas().AgentEvent;
    try {
      await this.transport.send(
        this.topics.schemas,
        Buffer.from(schema.fingerprint.toString('hex'), 'utf8'),
        Buffer.from(schema.jsonText, 'utf8'),
      );
    } catch (error) {
      this.log.warn(`announcing the writer schema on ${this.topics.schemas} failed: ${String(error)}`);
    }
  }
}

/** Events a run keeps in `run.events` (the most recent ones). */
const EVENTS_KEPT = 1000;

/** One agent run: numbers its events and applies loopguard's decisions to its cycles. */
export class GatewayRun {
  /** Seq of the last event published (RunStarted is 1). */
  seq = 0;
  /** The most recent events this run published, in order (audits, tests). */
  readonly events: AgentEvent[] = [];
  private lastGuardedSeq = 0;
  /** The block a call is held on now (`onBlock: "hold"`, issue 43), and how many were held. */
  holding: Decision | undefined;
  holds = 0;
  /** Usage reported since the last event that carried it (see {@link reportUsage}). */
  private pendingUsage: { inputTokens: number; outputTokens: number; costUsd: number | null } | undefined;

  /** @internal use {@link GatewayClient.startRun} */
  constructor(
    readonly client: GatewayClient,
    readonly runId: string,
    readonly agentId: string,
    /** The session the run belongs to; its events are keyed by it. */
    readonly sessionId: string | null = null,
  ) {}

  /**
   * Encode and publish the next event of the run. Encoding errors (a NUL in a tool name, ...)
   * throw here and use no seq; sending happens in the background, in order.
   */
  emit(body: DistributiveOmit<AgentEventInput, 'runId' | 'agentId' | 'gatewayId' | 'seq' | 'eventTime'>): AgentEvent {
    const usage = body.kind === 'tool_call' || body.kind === 'run_ended' ? this.takeUsage(body) : {};
    const event = {
      ...body,
      ...usage,
      runId: this.runId,
      agentId: this.agentId,
      gatewayId: this.client.gatewayId,
      seq: this.seq + 1,
      eventTime: this.client.clock(),
      ...(this.sessionId ? { sessionId: this.sessionId } : {}),
    } as AgentEventInput;
    const value = encodeEvent(event);
    this.seq += 1;
    if (event.kind !== 'run_started') this.lastGuardedSeq = this.seq;
    void this.client.send(this.runId, value, this.sessionId || this.runId);
    const full = withDefaults(event);
    this.events.push(full);
    if (this.events.length > EVENTS_KEPT) this.events.splice(0, this.events.length - EVENTS_KEPT);
    return full;
  }

  /**
   * Report a model turn's usage (issue 28): it goes out with the run's next tool call or its
   * end (the events that carry a turn), added to whatever else was reported meanwhile.
   * Negative or non-finite values are ignored.
   */
  reportUsage(usage: TurnUsage): void {
    const tokens = (value: number | null | undefined) =>
      typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.round(value) : 0;
    const cost = usage.costUsd;
    const pending = this.pendingUsage ?? { inputTokens: 0, outputTokens: 0, costUsd: null };
    pending.inputTokens += tokens(usage.inputTokens);
    pending.outputTokens += tokens(usage.outputTokens);
    if (typeof cost === 'number' && Number.isFinite(cost) && cost >= 0) pending.costUsd = (pending.costUsd ?? 0) + cost;
    this.pendingUsage = pending;
  }

  /** The usage an event carries: what was reported (and what the event names itself). */
  private takeUsage(body: TurnUsage): TurnUsage {
    if (body.inputTokens != null || body.outputTokens != null || body.costUsd != null) this.reportUsage(body);
    const pending = this.pendingUsage;
    this.pendingUsage = undefined;
    if (!pending) return {};
    return { inputTokens: pending.inputTokens, outputTokens: pending.outputTokens, costUsd: pending.costUsd };
  }

  /**
   * Publish the call and say whether it may run; throws {@link RunAborted}. A refused call is
   * published as finished, with the refusal as its result. `options`: the model turn that asked
   * for the call, its usage if not reported already ({@link reportUsage}) and its `turnId`.
   */
  async beforeTool(
    toolName: string,
    args: unknown,
    toolCallId?: string | null,
    options?: BeforeToolOptions,
  ): Promise<Verdict> {
    const argsJson = pyJsonDumps(args); // may throw (circular args) before anything is published
    let timedOut = false;
    if (this.lastGuardedSeq > 0) {
      const target = this.lastGuardedSeq;
      timedOut = !(await this.client.awaitWatermark(this.runId, target));
    }
    const taken = this.client.takeVerdict(this.runId, toolName, this.agentId); // throws RunAborted
    const { warnings } = taken;
    let block = taken.block;
    const hold = holdSettings(block);
    if (block && hold) {
      const answer = await this.hold(block, hold);
      if (answer?.detector === ABORT_DETECTOR) throw new RunAborted(answer);
      if (answer) block = undefined; // released: the call goes through
    }
    let verdict: Verdict;
    if (block) {
      verdict = { allowed: false, warnings, blockedBy: block, reason: modelNote(block) || block.reason, timedOut };
    } else if (timedOut && this.client.failMode === 'closed') {
      verdict = {
        allowed: false,
        warnings,
        reason: `loopguard did not answer within ${this.client.waitBudgetMs} ms (failMode closed)`,
        timedOut,
      };
    } else {
      verdict = { allowed: true, warnings, timedOut };
    }
    const notes = modelNotes(warnings);
    if (notes) verdict.modelNote = notes;
    if (timedOut) this.client.noteTimeout(this.runId, this.lastGuardedSeq, !block && !verdict.allowed);
    const { turnId, ...usage } = options ?? {};
    // usage as before (`{}` too); options naming only the turn carry no usage
    if (options && (turnId === undefined || Object.keys(usage).length > 0)) this.reportUsage(usage);
    const turn = turnId ? { turnId } : {};
    this.emit({ kind: 'tool_call', toolName, argsJson, toolCallId: toolCallId ?? null, ...turn });
    if (!verdict.allowed) {
      const refusal = verdict.blockedBy ? LOOP_VETO_RESULT : GUARD_TIMEOUT_RESULT;
      await this.afterTool(toolName, args, { result: refusal, toolCallId });
    }
    return verdict;
  }

  /**
   * Hold a blocked call (`onBlock: "hold"`, issue 43) until an operator's release or abort of
   * the run arrives; with no answer in time publish the agent's hold default and wait (bounded)
   * for the worker's answer to it. The answer, or undefined: refuse the call.
   */
  private async hold(block: Decision, settings: HoldSettings): Promise<Decision | undefined> {
    const known = this.client.decisions(this.runId);
    const blockId = block.decisionId || decisionIdOf(block);
    const index = known.findIndex((d) => (d.decisionId || decisionIdOf(d)) === blockId);
    const since = index >= 0 ? index + 1 : known.length;
    this.holding = block;
    this.holds += 1;
    try {
      let answer = await this.operatorAnswer(since, settings.timeoutMs);
      if (!answer && settings.holdDefault !== 'refuse') {
        const command = encodeOperatorCommand({
          runId: this.runId,
          agentId: this.agentId,
          sessionId: this.sessionId,
          eventTime: this.client.clock(),
          command: settings.holdDefault,
          releaseId: randomUUID().replace(/-/g, ''),
          calls: settings.holdDefault === 'release' ? DEFAULT_RELEASE_CALLS : null,
          reason:
            `no answer within ${Math.round(settings.timeoutMs / 1000)} s of holding a blocked call ` +
            `(${block.detector}): holdDefault ${settings.holdDefault}`,
          releasedBy: `gateway ${this.client.gatewayId}`,
          source: 'hold',
        });
        await this.client.publishCommand(this.runId, this.sessionId || this.runId, command);
        answer = await this.operatorAnswer(since, DEFAULT_ANSWER_WAIT_MS);
      }
      return answer;
    } finally {
      this.holding = undefined;
    }
  }

  private async operatorAnswer(since: number, timeoutMs: number): Promise<Decision | undefined> {
    try {
      const seen = await this.client.waitFor(this.runId, (ds) => operatorAnswer(ds, since) !== undefined, timeoutMs);
      return operatorAnswer(seen, since);
    } catch {
      return undefined;
    }
  }

  /** Publish the tool's outcome (`result`, or `error` if it failed). */
  async afterTool(toolName: string, args: unknown, outcome: AfterToolOptions = {}): Promise<void> {
    const { result, error, toolCallId } = outcome;
    this.emit({
      kind: 'tool_result',
      toolName,
      argsJson: pyJsonDumps(args),
      resultJson: result === undefined || result === null ? null : pyJsonDumps(result),
      error: error ?? null,
      toolCallId: toolCallId ?? null,
    });
  }

  /** The runner compacted the context and retried. */
  async compaction(trigger = 'context_overflow'): Promise<void> {
    this.emit({ kind: 'compaction_retry', trigger });
  }

  /** Publish RunEnded (with the usage not sent yet) and wait (bounded) until the run's events are sent. */
  async end(status = 'completed', usage?: TurnUsage): Promise<void> {
    if (usage) this.reportUsage(usage);
    this.emit({ kind: 'run_ended', status });
    this.client.endRun(this.runId);
    await this.client.flush();
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

function withDefaults(event: AgentEventInput): AgentEvent {
  switch (event.kind) {
    case 'tool_call':
      return { argsJson: '{}', toolCallId: null, ...event } as AgentEvent;
    case 'tool_result':
      return { argsJson: null, resultJson: null, error: null, toolCallId: null, ...event } as AgentEvent;
    case 'compaction_retry':
      return { trigger: 'context_overflow', ...event } as AgentEvent;
    case 'run_ended':
      return { status: 'completed', ...event } as AgentEvent;
    default:
      return { ...event } as AgentEvent;
  }
}

// -- Kafka transport -------------------------------------------------------------------

const KAFKAJS_LEVEL_NAMES: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/** kafkajs producer + group-less control reader. */
class KafkaTransport implements Transport {
  private readonly kafka: Kafka;
  private readonly producer: Producer;
  private reader?: ControlReader;
  private readonly partitionCounts = new Map<string, number>();
  private readonly partitioner = Partitioners.DefaultPartitioner();

  constructor(
    private readonly options: GatewayClientOptions,
    private readonly topics: Topics,
    private readonly log: Required<Logger>,
  ) {
    const brokers = parseBrokers(options.brokers); // BrokerAddressError before any connection
    const extras = options.kafka ?? {};
    // kafkajs logs every failed connection attempt at ERROR while a broker is away: pass each
    // distinct message on at most once every 30 s, the repeats at debug level.
    const limited = new RateLimitedLog(30_000);
    this.kafka = new Kafka({
      clientId: `loopguard-gateway-${options.gatewayId}`,
      connectionTimeout: 3000,
      logLevel: logLevel.WARN,
      logCreator: () => (entry) => {
        const level = KAFKAJS_LEVEL_NAMES[entry.level] ?? 'info';
        const { message, ...extra } = entry.log as unknown as { message: string; [key: string]: unknown };
        delete extra.timestamp;
        delete extra.logger;
        const text = `kafkajs ${entry.namespace}: ${message}`;
        const suppressed = level === 'error' || level === 'warn' ? limited.allow(text) : 0;
        if (suppressed < 0) this.log.debug(text, extra);
        else this.log[level](suppressed > 0 ? `${text} (${suppressed} repeats not logged)` : text, extra);
      },
      ...extras,
      // Reconnection: kafkajs reconnects and retries every request with backoff; these bound
      // one send to a few seconds of retrying while a broker is away (then it is logged).
      retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 5, ...(extras.retry ?? {}) },
      brokers,
    });
    this.producer = this.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner, // murmur2, as the Java and Python clients
      allowAutoTopicCreation: false,
      idempotent: false,
    });
  }

  get reconnects(): number {
    return this.reader?.reconnects ?? 0;
  }

  async start(onRecord: (record: ControlRecord) => void): Promise<void> {
    await this.producer.connect();
    if (this.options.maxEventsPerPartition) await this.learnPartitions(this.topics.events);
    this.reader = new ControlReader(this.kafka, {
      topic: this.topics.control,
      logger: this.log,
      onRecord,
      fetchMaxWaitMs: this.options.fetchMaxWaitMs,
      topicWaitMs: this.options.controlTopicWaitMs,
    });
    await this.reader.start();
  }

  async send(topic: string, key: Buffer, value: Buffer, headers?: Record<string, string>): Promise<void> {
    await this.producer.send({ topic, acks: -1, messages: [{ key, value, ...(headers ? { headers } : {}) }] });
  }

  /** One produce request: kafkajs groups the records per partition (a record batch each). */
  async sendBatch(topic: string, records: OutRecord[]): Promise<void> {
    await this.producer.send({
      topic,
      acks: -1,
      messages: records.map(({ key, value, headers }) => ({ key, value, ...(headers ? { headers } : {}) })),
    });
  }

  partitionCount(topic: string): number | undefined {
    return this.partitionCounts.get(topic);
  }

  /** The default partitioner's choice for `key` once the topic's partition count is known. */
  partitionOf(topic: string, key: Buffer): number | undefined {
    const count = this.partitionCounts.get(topic);
    if (!count) return undefined;
    return this.partitioner({ topic, partitionMetadata: this.partitionMetadata(count), message: { key, value: null } });
  }

  private partitionMetadata(count: number): PartitionMetadata[] {
    return Array.from({ length: count }, (_, partitionId) => ({
      partitionId,
      leader: 0,
      replicas: [],
      isr: [],
      partitionErrorCode: 0,
    })) as PartitionMetadata[];
  }

  /** Learn the events topic's partition count (for `maxEventsPerPartition`); best effort. */
  async learnPartitions(topic: string): Promise<void> {
    const admin = this.kafka.admin();
    try {
      await admin.connect();
      const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
      const count = metadata.topics[0]?.partitions.length ?? 0;
      if (count > 0) this.partitionCounts.set(topic, count);
    } catch (error) {
      this.log.warn(`cannot read the partitions of ${topic} (events go one per request): ${String(error)}`);
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    await this.reader?.stop();
    await this.producer.disconnect();
  }
}
