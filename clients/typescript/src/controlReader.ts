/**
 * Reads every partition of a topic (the control topic) without a consumer group, as the Python gateway
 * client does (kafka-python `assign` + `seek_to_end`).
 *
 * kafkajs has no public group-less consumer: its Consumer always joins a group. A group per
 * gateway would make every gateway wait for a JoinGroup before it hears a decision (about a
 * second or more on tansu, `group.initial.rebalance.delay.ms` = 3 s for a new group on Apache
 * Kafka), leave one stale group per gateway start on the broker, and after a rejoin resume from
 * "latest" (nothing committed) and so lose the decisions published while it was away. So this
 * reader drives kafkajs's own Cluster/Broker objects (the ones its Consumer uses) directly:
 * metadata, ListOffsets and Fetch requests, with kafkajs's connection handling, SASL/SSL,
 * socket factory and protocol decoding, and its own positions kept across reconnects.
 *
 * Those objects are kafkajs internals. They have not changed through the 2.x line, the
 * dependency is pinned to an exact version, and {@link createCluster} fails loudly if the hook
 * is missing; the integration test exercises every call made here.
 *
 * Behaviour:
 * - start: waits (up to `topicWaitMs`) for the topic to exist, takes every partition's end
 *   offset (ListOffsets latest) and starts fetching there: decisions published before the
 *   gateway started are not replayed.
 * - fetch loop: one Fetch per partition leader, `maxWaitTime` = `fetchMaxWaitMs` (short: the
 *   tansu broker holds an empty fetch for the whole wait instead of answering when data
 *   arrives), positions advanced past every record handed over (control records and aborted
 *   transactional records are skipped, as kafkajs's consumer does). Each leader is fetched
 *   again as soon as its answer is handled: a leader with records never waits for another
 *   leader's empty fetch to run out its wait.
 * - errors (broker down, leader moved, topic recreated): logged (rate-limited), metadata
 *   refreshed, retried with exponential backoff up to `maxBackoffMs`; never thrown.
 * - a partition whose log end moved behind our position (the broker lost or truncated its
 *   log, e.g. a memory-storage broker restarted) or an OFFSET_OUT_OF_RANGE answer: re-read
 *   from the earliest offset (decisions are deduplicated by id, watermarks only ever raise).
 * - partitions added to the topic later are read from their beginning.
 */

import type { Kafka } from 'kafkajs';

import { type Logger, RateLimitedLog } from './logger';

export interface ControlRecord {
  partition: number;
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  /** The record's headers (a worker's signature, issue 40). */
  headers?: Record<string, Buffer | string | (Buffer | string)[] | undefined>;
}

export interface ControlReaderOptions {
  topic: string;
  logger: Required<Logger>;
  onRecord: (record: ControlRecord) => void;
  fetchMaxWaitMs?: number;
  topicWaitMs?: number;
  metadataRefreshMs?: number;
  maxBackoffMs?: number;
  maxBytesPerPartition?: number;
  /** Start at the beginning of every partition instead of its end (tools, tests). */
  fromBeginning?: boolean;
}

/* Shapes of the kafkajs internals used here (kafkajs 2.2.x, src/cluster and src/broker). */
interface KjsPartitionMetadata {
  partitionId: number;
  leader: number;
}
interface KjsMessage {
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers?: Record<string, Buffer | (Buffer | string)[] | undefined>;
  isControlRecord?: boolean;
}
interface KjsFetchPartition {
  partition: number;
  errorCode: number;
  highWatermark: string;
  abortedTransactions?: unknown[];
  messages: KjsMessage[];
}
interface KjsBroker {
  fetch(request: {
    replicaId?: number;
    isolationLevel: number;
    maxWaitTime: number;
    minBytes: number;
    maxBytes: number;
    topics: { topic: string; partitions: { partition: number; fetchOffset: string; maxBytes: number }[] }[];
  }): Promise<{ responses: { topicName: string; partitions: KjsFetchPartition[] }[] }>;
}
interface KjsCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  refreshMetadata(): Promise<void>;
  addTargetTopic(topic: string): Promise<void>;
  findTopicPartitionMetadata(topic: string): KjsPartitionMetadata[];
  findLeaderForPartitions(topic: string, partitions: number[]): Record<string, number[]>;
  findBroker(args: { nodeId: string }): Promise<KjsBroker>;
  fetchTopicsOffset(
    topics: { topic: string; fromBeginning: boolean; partitions: { partition: number }[] }[],
  ): Promise<{ topic: string; partitions: { partition: number; offset: string }[] }[]>;
}

const READ_UNCOMMITTED = 0; // as kafka-python's default isolation level

/** A kafkajs Cluster built with the Kafka client's own settings (brokers, ssl, sasl, retry, ...). */
export function createCluster(kafka: Kafka): KjsCluster {
  const hook = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster');
  const create = hook && (kafka as unknown as Record<symbol, unknown>)[hook];
  if (typeof create !== 'function') {
    throw new Error(
      'this kafkajs version has no createCluster hook; @loopguard/client needs kafkajs 2.2.x (pinned in package.json)',
    );
  }
  return create.call(kafka, {
    metadataMaxAge: 300_000,
    allowAutoTopicCreation: false,
    isolationLevel: READ_UNCOMMITTED,
  }) as KjsCluster;
}

// kafkajs's consumer Batch: drops records below the fetch offset, aborted and control records.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const Batch = require('kafkajs/src/consumer/batch') as new (
  topic: string,
  fetchedOffset: string,
  partitionData: KjsFetchPartition,
) => { messages: KjsMessage[]; messagesWithinOffset: KjsMessage[] };

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class ControlReader {
  private readonly cluster: KjsCluster;
  private readonly topic: string;
  private readonly log: Required<Logger>;
  private readonly limited = new RateLimitedLog(30_000);
  private readonly positions = new Map<number, bigint>();
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private lastMetadataAt = 0;
  private failures = 0;
  private readonly opts: Required<Omit<ControlReaderOptions, 'topic' | 'logger' | 'onRecord' | 'fromBeginning'>>;

  /** Fetches answered, counted per leader (tests, stats). */
  fetches = 0;
  /** Times the loop recovered after errors. */
  reconnects = 0;

  constructor(
    kafka: Kafka,
    private readonly options: ControlReaderOptions,
  ) {
    this.cluster = createCluster(kafka);
    this.topic = options.topic;
    this.log = options.logger;
    this.opts = {
      fetchMaxWaitMs: options.fetchMaxWaitMs ?? 20,
      topicWaitMs: options.topicWaitMs ?? 30_000,
      metadataRefreshMs: options.metadataRefreshMs ?? 30_000,
      maxBackoffMs: options.maxBackoffMs ?? 5_000,
      maxBytesPerPartition: options.maxBytesPerPartition ?? 4 * 1024 * 1024,
    };
  }

  /** Connect, find every partition, start at their end offsets, start the fetch loop. */
  async start(): Promise<void> {
    await this.cluster.connect();
    const partitions = await this.waitForTopic();
    const ends = await this.offsets(partitions, this.options.fromBeginning ?? false);
    for (const p of partitions) this.positions.set(p, ends.get(p) ?? 0n);
    this.lastMetadataAt = Date.now();
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop?.catch(() => undefined);
    await this.cluster.disconnect().catch(() => undefined);
  }

  /** Next offset to read, per partition. */
  snapshot(): Record<number, string> {
    return Object.fromEntries([...this.positions].map(([p, o]) => [p, o.toString()]));
  }

  private async waitForTopic(): Promise<number[]> {
    const deadline = Date.now() + this.opts.topicWaitMs;
    for (;;) {
      try {
        await this.cluster.addTargetTopic(this.topic); // refreshes metadata for the topic
        await this.cluster.refreshMetadata();
        const partitions = this.partitionIds();
        if (partitions.length) return partitions;
      } catch (error) {
        if (Date.now() >= deadline) throw error;
      }
      if (Date.now() >= deadline) {
        throw new Error(`control topic ${JSON.stringify(this.topic)} not found; is a worker running?`);
      }
      await sleep(200);
    }
  }

  private partitionIds(): number[] {
    try {
      return this.cluster
        .findTopicPartitionMetadata(this.topic)
        .map((m) => m.partitionId)
        .sort((a, b) => a - b);
    } catch {
      return [];
    }
  }

  private async offsets(partitions: number[], fromBeginning: boolean): Promise<Map<number, bigint>> {
    const result = await this.cluster.fetchTopicsOffset([
      { topic: this.topic, fromBeginning, partitions: partitions.map((partition) => ({ partition })) },
    ]);
    const out = new Map<number, bigint>();
    for (const t of result) for (const p of t.partitions) out.set(p.partition, BigInt(p.offset));
    return out;
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (Date.now() - this.lastMetadataAt > this.opts.metadataRefreshMs) await this.refreshPartitions();
        await this.fetchOnce();
      } catch (error) {
        if (!this.running) break;
        await this.recover(error);
      }
    }
  }

  /** Fetch from every partition leader, each in its own loop, until the metadata is due for
   *  a refresh, the reader stops or one leader's fetch fails (the others then finish their
   *  fetch in flight, and the error goes to {@link recover}). */
  private async fetchOnce(): Promise<void> {
    const partitions = [...this.positions.keys()];
    const byLeader = this.cluster.findLeaderForPartitions(this.topic, partitions);
    const leaders = Object.entries(byLeader);
    if (leaders.length === 0) {
      // Leaders unknown (metadata lost): refresh and try again shortly.
      await this.cluster.refreshMetadata();
      await sleep(this.opts.fetchMaxWaitMs);
      return;
    }
    const round = { failed: false };
    const results = await Promise.allSettled(
      leaders.map(([nodeId, ids]) => this.fetchFromLeader(nodeId, ids, round)),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  private async fetchFromLeader(nodeId: string, ids: number[], round: { failed: boolean }): Promise<void> {
    try {
      const broker = await this.cluster.findBroker({ nodeId });
      do {
        const wanted = ids.map((partition) => ({
          partition,
          fetchOffset: (this.positions.get(partition) ?? 0n).toString(),
          maxBytes: this.opts.maxBytesPerPartition,
        }));
        const response = await broker.fetch({
          isolationLevel: READ_UNCOMMITTED,
          maxWaitTime: this.opts.fetchMaxWaitMs,
          minBytes: 1,
          maxBytes: this.opts.maxBytesPerPartition * Math.max(1, wanted.length),
          topics: [{ topic: this.topic, partitions: wanted }],
        });
        for (const topicData of response.responses) {
          if (topicData.topicName !== this.topic) continue;
          for (const partitionData of topicData.partitions) {
            const requested = wanted.find((w) => w.partition === partitionData.partition);
            if (requested) await this.handlePartition(requested.fetchOffset, partitionData);
          }
        }
        this.fetches++;
        this.readingAgain();
      } while (
        this.running &&
        !round.failed &&
        Date.now() - this.lastMetadataAt <= this.opts.metadataRefreshMs
      );
    } catch (error) {
      round.failed = true;
      throw error;
    }
  }

  /** A fetch answered after failed ones: say so once, count the reconnect. */
  private readingAgain(): void {
    if (this.failures === 0) return;
    this.log.info(`control topic ${this.topic}: reading again after ${this.failures} failed attempt(s)`);
    this.failures = 0;
    this.reconnects++;
  }

  private async handlePartition(fetchOffset: string, data: KjsFetchPartition): Promise<void> {
    const partition = data.partition;
    const position = BigInt(fetchOffset);
    const batch = new Batch(this.topic, fetchOffset, data);
    const within = batch.messagesWithinOffset;
    if (within.length === 0) {
      const end = BigInt(data.highWatermark);
      if (end >= 0n && end < position) {
        // The log ends before where we are: the broker lost or truncated it.
        this.log.warn(
          `control topic ${this.topic}[${partition}] ends at ${end}, before our position ${position}: ` +
            'the broker lost or truncated its log; reading the partition again from its beginning',
        );
        await this.resetToEarliest([partition]);
      }
      return;
    }
    for (const message of batch.messages) {
      if (!this.running) return;
      try {
        this.options.onRecord({ partition, offset: message.offset, key: message.key, value: message.value, headers: message.headers });
      } catch (error) {
        this.log.error(`control record handler failed at ${this.topic}[${partition}]@${message.offset}: ${String(error)}`);
      }
    }
    const last = within[within.length - 1];
    if (this.positions.get(partition) === position) this.positions.set(partition, BigInt(last.offset) + 1n);
  }

  private async resetToEarliest(partitions: number[]): Promise<void> {
    const earliest = await this.offsets(partitions, true);
    for (const p of partitions) this.positions.set(p, earliest.get(p) ?? 0n);
  }

  private async refreshPartitions(): Promise<void> {
    this.lastMetadataAt = Date.now();
    await this.cluster.refreshMetadata();
    const added = this.partitionIds().filter((p) => !this.positions.has(p));
    if (added.length) {
      this.log.info(`control topic ${this.topic}: new partition(s) ${added.join(', ')}, read from their beginning`);
      const earliest = await this.offsets(added, true);
      for (const p of added) this.positions.set(p, earliest.get(p) ?? 0n);
    }
  }

  private async recover(error: unknown): Promise<void> {
    this.failures++;
    const err = error as { name?: string; type?: string; message?: string; partition?: number };
    if (err?.name === 'KafkaJSOffsetOutOfRange' && typeof err.partition === 'number') {
      this.log.warn(
        `control topic ${this.topic}[${err.partition}]: offset ${this.positions.get(err.partition)} out of range; ` +
          'reading the partition again from its beginning',
      );
      try {
        await this.resetToEarliest([err.partition]);
        return;
      } catch {
        // fall through to the backoff below
      }
    }
    const what = `${err?.name ?? 'Error'}${err?.type ? ` ${err.type}` : ''}: ${err?.message ?? String(error)}`;
    const suppressed = this.limited.allow(what);
    if (suppressed >= 0) {
      this.log.warn(
        `control topic ${this.topic}: fetch failed (${what}); retrying` +
          (suppressed > 0 ? ` (${suppressed} similar failure(s) not logged)` : ''),
      );
    }
    const backoff = Math.min(this.opts.maxBackoffMs, 100 * 2 ** Math.min(this.failures - 1, 10));
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, backoff * (0.8 + Math.random() * 0.4));
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = undefined;
    if (!this.running) return;
    try {
      await this.cluster.refreshMetadata();
      this.lastMetadataAt = Date.now();
      const known = this.partitionIds();
      const added = known.filter((p) => !this.positions.has(p));
      if (added.length) {
        const earliest = await this.offsets(added, true);
        for (const p of added) this.positions.set(p, earliest.get(p) ?? 0n);
      }
    } catch {
      // the next fetch reports it
    }
  }
}
