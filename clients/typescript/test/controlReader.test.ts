import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { Kafka } from 'kafkajs';

import { ControlReader, type ControlRecord } from '../src';
import { CapturingLogger } from './fakes';

const TOPIC = 'lg.control';

/** One partition's log on a fake broker: records appended, fetched from an offset. */
class FakeLog {
  readonly records: Buffer[] = [];
  waiting: (() => void)[] = [];

  append(value: Buffer): void {
    this.records.push(value);
    for (const wake of this.waiting.splice(0)) wake();
  }
}

/**
 * A broker that answers a Fetch as Apache Kafka does: at once when a wanted partition has
 * records past the fetch offset, else when one gets some or the wait runs out.
 */
class FakeBroker {
  fetches = 0;

  constructor(private readonly logs: Map<number, FakeLog>) {}

  async fetch(request: {
    maxWaitTime: number;
    topics: { topic: string; partitions: { partition: number; fetchOffset: string }[] }[];
  }) {
    this.fetches++;
    const wanted = request.topics[0].partitions;
    const ready = () => wanted.some((w) => this.logs.get(w.partition)!.records.length > Number(w.fetchOffset));
    if (!ready()) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, request.maxWaitTime);
        for (const w of wanted) {
          this.logs.get(w.partition)!.waiting.push(() => {
            clearTimeout(timer);
            resolve();
          });
        }
      });
    }
    return {
      responses: [
        {
          topicName: TOPIC,
          partitions: wanted.map((w) => {
            const log = this.logs.get(w.partition)!;
            return {
              partition: w.partition,
              highWatermark: String(log.records.length),
              abortedTransactions: [],
              messages: log.records
                .map((value, offset) => ({ offset: String(offset), key: null, value }))
                .slice(Number(w.fetchOffset)),
            };
          }),
        },
      ],
    };
  }
}

/** kafkajs's Kafka as the reader sees it: the private createCluster hook, two leaders. */
function fakeKafka(brokers: Map<string, FakeBroker>, leaderOf: Map<number, string>, logs: Map<number, FakeLog>) {
  const cluster = {
    connect: async () => undefined,
    disconnect: async () => undefined,
    addTargetTopic: async () => undefined,
    refreshMetadata: async () => undefined,
    findTopicPartitionMetadata: () => [...leaderOf].map(([partitionId, leader]) => ({ partitionId, leader: Number(leader) })),
    fetchTopicsOffset: async (topics: { partitions: { partition: number }[] }[]) => [
      {
        topic: TOPIC,
        partitions: topics[0].partitions.map(({ partition }) => ({
          partition,
          offset: String(logs.get(partition)!.records.length),
        })),
      },
    ],
    findLeaderForPartitions: (_topic: string, partitions: number[]) => {
      const byLeader: Record<string, number[]> = {};
      for (const p of partitions) (byLeader[leaderOf.get(p)!] ??= []).push(p);
      return byLeader;
    },
    findBroker: async ({ nodeId }: { nodeId: string }) => brokers.get(nodeId)!,
  };
  const hook = Symbol('private:Kafka:createCluster');
  return { [hook]: () => cluster } as unknown as Kafka;
}

describe('ControlReader', () => {
  it('reads a leader again as soon as it answers, without waiting out the other leaders', { timeout: 10_000 }, async () => {
    const logs = new Map([
      [0, new FakeLog()],
      [1, new FakeLog()],
    ]);
    const brokers = new Map([
      ['1', new FakeBroker(logs)],
      ['2', new FakeBroker(logs)],
    ]);
    const leaderOf = new Map([
      [0, '1'],
      [1, '2'],
    ]);
    const heard: { record: ControlRecord; at: number }[] = [];
    const reader = new ControlReader(fakeKafka(brokers, leaderOf, logs), {
      topic: TOPIC,
      logger: new CapturingLogger(),
      onRecord: (record) => heard.push({ record, at: Date.now() }),
      fetchMaxWaitMs: 2_000, // partition 1's leader holds its empty fetch this long
    });
    await reader.start();
    try {
      // Two records on partition 0, one after the other: the second is fetched by the
      // leader's next fetch, while the other leader still holds its empty one.
      const sentAt = Date.now();
      logs.get(0)!.append(Buffer.from('first'));
      while (heard.length < 1) await new Promise((r) => setTimeout(r, 5));
      logs.get(0)!.append(Buffer.from('second'));
      while (heard.length < 2) await new Promise((r) => setTimeout(r, 5));
      assert.deepEqual(
        heard.map((h) => h.record.value?.toString()),
        ['first', 'second'],
      );
      assert.ok(heard[1].at - sentAt < 1_000, `second record heard after ${heard[1].at - sentAt} ms`);
      assert.equal(brokers.get('2')!.fetches, 1); // still its first fetch, waiting
      assert.ok(brokers.get('1')!.fetches >= 3);
      assert.deepEqual(reader.snapshot(), { 0: '2', 1: '0' });
    } finally {
      await reader.stop();
    }
  });
});
