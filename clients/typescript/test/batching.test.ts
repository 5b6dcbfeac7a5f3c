import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { GatewayClient, type OutRecord, decodeEvent } from '../src';
import { CapturingLogger, RecordingTransport } from './fakes';

/** A transport that records each request (a batch) and can hold requests until released. */
class BatchingTransport extends RecordingTransport {
  readonly requests: { topic: string; keys: string[]; seqs: number[] }[] = [];
  partitions = 0;
  private held: (() => void)[] = [];
  hold = false;

  async sendBatch(topic: string, records: OutRecord[]): Promise<void> {
    if (this.hold) await new Promise<void>((resolve) => this.held.push(resolve));
    this.requests.push({
      topic,
      keys: records.map((r) => r.key.toString()),
      seqs: records.map((r) => Number(decodeEvent(r.value).seq)),
    });
    for (const r of records) this.sent.push({ topic, key: r.key.toString(), value: r.value });
  }

  partitionOf(_topic: string, key: Buffer): number | undefined {
    return this.partitions ? Number(key.toString().split('-')[1]) % this.partitions : undefined;
  }

  release(): void {
    this.hold = false;
    for (const resolve of this.held.splice(0)) resolve();
  }
}

function client(transport: BatchingTransport, options = {}) {
  return GatewayClient.withTransport({ gatewayId: 'gw-ts', logger: new CapturingLogger(), waitBudgetMs: 0, ...options }, transport);
}

describe('batched sends', () => {
  it('sends what arrives while a request is in flight in one next request, in order per run', async () => {
    const transport = new BatchingTransport();
    const c = client(transport, { maxInFlightRequests: 1 });
    transport.hold = true;
    const first = c.startRun({ agentId: 'a', runId: 'run-0' }); // request 1 (held)
    await new Promise((resolve) => setImmediate(resolve));
    const runs = [first, ...[1, 2, 3, 4].map((i) => c.startRun({ agentId: 'a', runId: `run-${i}` }))];
    for (let i = 0; i < 3; i++) for (const run of runs) await run.beforeTool('exec', { i });
    transport.release();
    assert.ok(await c.flush(5000));
    assert.equal(transport.requests.length, 2, JSON.stringify(transport.requests));
    assert.equal(transport.requests[1].seqs.length, 4 + 15);
    assert.equal(c.stats().sendRequests, 2);
    assert.equal(c.stats().published, 20);
    for (const run of runs) {
      const seqs = transport.events().filter((e) => e.runId === run.runId).map((e) => Number(e.seq));
      assert.deepEqual(seqs, [1, 2, 3, 4]);
    }
  });

  it("with requests in flight for its key, a run's next event waits; other keys take a free request", async () => {
    const transport = new BatchingTransport();
    const c = client(transport); // 5 requests in flight at most
    transport.hold = true;
    const runs = [1, 2, 3].map((i) => c.startRun({ agentId: 'a', runId: `run-${i}` }));
    await new Promise((resolve) => setImmediate(resolve));
    for (const run of runs) await run.beforeTool('exec', {}); // keys in flight: all queued
    const other = c.startRun({ agentId: 'a', runId: 'run-9' }); // a free key: its own request
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(c.stats().sendRequests, 2);
    transport.release();
    assert.ok(await c.flush(5000));
    for (const run of [...runs, other]) {
      const seqs = transport.events().filter((e) => e.runId === run.runId).map((e) => Number(e.seq));
      assert.deepEqual(seqs, run === other ? [1] : [1, 2]);
    }
    assert.deepEqual(transport.requests.map((r) => r.seqs.length).sort(), [1, 3, 3]);
  });

  it('events emitted in the same tick share a request (no timer)', async () => {
    const transport = new BatchingTransport();
    const c = client(transport);
    const runs = [1, 2, 3].map((i) => c.startRun({ agentId: 'a', runId: `run-${i}` }));
    await c.flush(5000);
    assert.deepEqual(transport.requests.map((r) => r.seqs.length), [3]);
    for (const run of runs) await run.end();
  });

  it('with maxEventsPerPartition 1, a request carries one event per partition, still in order', async () => {
    const transport = new BatchingTransport();
    transport.partitions = 2;
    const c = client(transport, { maxEventsPerPartition: 1 });
    transport.hold = true;
    const runs = [0, 1, 2, 3].map((i) => c.startRun({ agentId: 'a', runId: `run-${i}` }));
    await new Promise((resolve) => setImmediate(resolve));
    for (const run of runs) await run.beforeTool('exec', {});
    transport.release();
    assert.ok(await c.flush(5000));
    for (const request of transport.requests) {
      const partitions = request.keys.map((k) => Number(k.split('-')[1]) % 2);
      assert.equal(new Set(partitions).size, partitions.length, JSON.stringify(transport.requests));
    }
    for (const run of runs) {
      const seqs = transport.events().filter((e) => e.runId === run.runId).map((e) => Number(e.seq));
      assert.deepEqual(seqs, [1, 2]);
    }
  });

  it('a failed request is counted for each of its events and the next one still goes', async () => {
    const transport = new BatchingTransport();
    const c = client(transport);
    transport.failWith = new Error('broker away');
    const failing = transport.sendBatch.bind(transport);
    transport.sendBatch = async (topic, records) => {
      if (transport.failWith) throw transport.failWith;
      return failing(topic, records);
    };
    c.startRun({ agentId: 'a', runId: 'run-1' });
    c.startRun({ agentId: 'a', runId: 'run-2' });
    await c.flush(5000);
    assert.equal(c.stats().publishErrors, 2);
    transport.failWith = undefined;
    c.startRun({ agentId: 'a', runId: 'run-3' });
    await c.flush(5000);
    assert.equal(c.stats().published, 1);
  });
});

describe('usage (issue 28)', () => {
  it('a reported turn goes out with the next call, then the rest with the run end', async () => {
    const transport = new BatchingTransport();
    const c = client(transport);
    const run = c.startRun({ agentId: 'a', runId: 'run-u' });
    run.reportUsage({ inputTokens: 1000, outputTokens: 20, costUsd: 0.01 });
    run.reportUsage({ inputTokens: 500, outputTokens: -3, costUsd: Number.NaN });
    await run.beforeTool('exec', {});
    await run.afterTool('exec', {}, { result: 'x' });
    await run.beforeTool('exec', { n: 2 }, null, { inputTokens: 7, outputTokens: 1 });
    await run.end('completed', { inputTokens: 3, outputTokens: 4, costUsd: 0.5 });
    const events = transport.events();
    const usage = events.map((e) => [e.kind, (e as { inputTokens?: number }).inputTokens, (e as { outputTokens?: number }).outputTokens, (e as { costUsd?: number | null }).costUsd]);
    assert.deepEqual(usage, [
      ['run_started', undefined, undefined, undefined],
      ['tool_call', 1500, 20, 0.01],
      ['tool_result', undefined, undefined, undefined],
      ['tool_call', 7, 1, undefined],
      ['run_ended', 3, 4, 0.5],
    ]);
  });

  it("a call's turn id (issue 44) goes on that call only, and carries no usage", async () => {
    const transport = new BatchingTransport();
    const c = client(transport);
    const run = c.startRun({ agentId: 'a', runId: 'run-t' });
    await run.beforeTool('web_fetch', { url: 'https://a' }, 'c-1', { turnId: 'msg-1', inputTokens: 900 });
    await run.beforeTool('web_fetch', { url: 'https://b' }, 'c-2', { turnId: 'msg-1' });
    await run.afterTool('web_fetch', { url: 'https://a' }, { result: 'x', toolCallId: 'c-1' });
    await run.beforeTool('read', { path: 'a' }, 'c-3');
    await c.flush();
    const seen = transport.events().map((e) => {
      const fields = e as unknown as Record<string, unknown>;
      return [e.kind, fields.turnId, fields.inputTokens];
    });
    assert.deepEqual(seen, [
      ['run_started', undefined, undefined],
      ['tool_call', 'msg-1', 900],
      ['tool_call', 'msg-1', undefined],
      ['tool_result', undefined, undefined],
      ['tool_call', undefined, undefined],
    ]);
    assert.equal((run.events[2] as { turnId?: string }).turnId, 'msg-1');
  });

  it('a call without usage carries none', async () => {
    const transport = new BatchingTransport();
    const c = client(transport);
    const run = c.startRun({ agentId: 'a', runId: 'run-n' });
    await run.beforeTool('exec', {});
    await c.flush();
    const call = transport.events()[1] as unknown as Record<string, unknown>;
    assert.equal('inputTokens' in call, false);
  });
});
