import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { EncodeError, GUARD_TIMEOUT_RESULT, RunAborted, type ToolResultEvent } from '../src';
import { decisionFor, makeClient, watermarkFor, watermarksFor } from './fakes';

const VETO_JSON = '{"details": {"status": "blocked", "deniedReason": "tool-loop"}}'; // Python's bytes

describe('GatewayClient / GatewayRun', () => {
  it('publishes RunStarted, then the call, keyed by run id; the first call does not wait', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 2000, failMode: 'closed' });
    const run = client.startRun({ agentId: 'agent', runId: 'run-a' });
    const started = Date.now();
    const verdict = await run.beforeTool('exec', { command: 'make test' }, 'call-1');
    assert.ok(Date.now() - started < 500);
    assert.deepEqual(verdict, { allowed: true, warnings: [], timedOut: false });
    await client.flush();
    const events = transport.events();
    assert.deepEqual(
      events.map((e) => [e.kind, e.seq]),
      [
        ['run_started', 1],
        ['tool_call', 2],
      ],
    );
    assert.ok(transport.sent.every((s) => s.key === 'run-a'));
    assert.equal(events[1].kind === 'tool_call' && events[1].argsJson, '{"command": "make test"}');
    assert.equal(client.stats().waits, 0);
  });

  it('keys a session run by its session id and puts the session on every event', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-s', sessionId: 'sess-1', trigger: 'compaction' });
    await run.beforeTool('exec', { command: 'ls' });
    run.end();
    await client.flush();
    const events = transport.events();
    assert.deepEqual(events.map((e) => [e.kind, e.runId, e.sessionId]), [
      ['run_started', 'run-s', 'sess-1'],
      ['tool_call', 'run-s', 'sess-1'],
      ['run_ended', 'run-s', 'sess-1'],
    ]);
    assert.equal(events[0].kind === 'run_started' && events[0].trigger, 'compaction');
    assert.deepEqual(transport.sent.map((s) => s.key), ['sess-1', 'sess-1', 'sess-1']);
    assert.deepEqual(run.events.map((e) => e.sessionId), ['sess-1', 'sess-1', 'sess-1']);
    // a run without a session: keyed by its run id, no session on its events
    const plain = client.startRun({ agentId: 'agent', runId: 'run-p' });
    await client.flush();
    assert.equal(transport.sent.at(-1)?.key, 'run-p');
    assert.ok(!('sessionId' in plain.events[0]) && !('trigger' in plain.events[0]));
  });

  it("serialises args and results like Python's json.dumps", async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent' });
    await run.afterTool('write', { path: '/tmp/ü', n: 1.5, big: 2 ** 60, list: [null, true] }, { result: { ok: true }, toolCallId: 'c' });
    await run.afterTool('read', undefined, { error: 'ENOENT' });
    await client.flush();
    const [, first, second] = transport.events() as ToolResultEvent[];
    assert.equal(first.argsJson, '{"path": "/tmp/ü", "n": 1.5, "big": 1152921504606846976, "list": [null, true]}');
    assert.equal(first.resultJson, '{"ok": true}');
    assert.equal(first.toolCallId, 'c');
    assert.equal(second.argsJson, 'null');
    assert.equal(second.resultJson, null);
    assert.equal(second.error, 'ENOENT');
  });

  it('hands over warnings once', async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-w' });
    client.ingestControl(decisionFor('run-w', 1, 'warn'));
    const first = await run.beforeTool('exec', {});
    assert.equal(first.allowed, true);
    assert.equal(first.warnings.length, 1);
    assert.equal((await run.beforeTool('exec', {})).warnings.length, 0);
  });

  it('a block refuses exactly the next call and publishes the refusal as its result', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-b' });
    client.ingestControl(decisionFor('run-b', 1, 'block'));
    const refused = await run.beforeTool('exec', { command: 'ls' }, 'call-9');
    assert.equal(refused.allowed, false);
    assert.equal(refused.blockedBy?.action, 'block');
    assert.equal(refused.reason, 'block because of a loop');
    assert.equal(refused.timedOut, false);
    assert.equal((await run.beforeTool('exec', { command: 'ls' })).allowed, true);
    await client.flush();
    const events = transport.events();
    assert.deepEqual(events.map((e) => e.kind), ['run_started', 'tool_call', 'tool_result', 'tool_call']);
    const veto = events[2] as ToolResultEvent;
    assert.equal(veto.resultJson, VETO_JSON);
    assert.equal(veto.argsJson, '{"command": "ls"}');
    assert.equal(veto.toolCallId, 'call-9');
    assert.equal(client.stats().blocks, 1);
  });

  it('a block limited to one tool (agent_cycle) refuses the agent\'s next call of it, in whichever run', async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const first = client.startRun({ agentId: 'agent', runId: 'run-c1' });
    const extra = { detector: 'agent_cycle', extra: { only_tool: 'sessions_send', agents: ['agent', 'b', 'c'] } };
    client.ingestControl(decisionFor('run-c1', 3, 'block', extra));
    client.ingestControl(decisionFor('run-c1', 3, 'block', extra)); // redelivered: one block
    assert.equal((await first.beforeTool('read', { path: 'x' })).allowed, true); // other tools run
    first.end();
    // OpenClaw starts a run per message: the agent's next run's send is the one refused
    const next = client.startRun({ agentId: 'agent', runId: 'run-c2' });
    const refused = await next.beforeTool('sessions_send', { sessionKey: 'agent:b:main', message: 'm' });
    assert.equal(refused.allowed, false);
    assert.equal(refused.blockedBy?.detector, 'agent_cycle');
    assert.equal((await next.beforeTool('sessions_send', { sessionKey: 'agent:b:main', message: 'm' })).allowed, true);
    // another agent's sends, and another gateway's blocks, are not this agent's
    const other = client.startRun({ agentId: 'other', runId: 'run-c3' });
    client.ingestControl(decisionFor('run-c3', 1, 'block', { ...extra, gatewayId: 'gw-elsewhere' }));
    assert.equal((await other.beforeTool('sessions_send', { agentId: 'b', message: 'm' })).allowed, true);
  });

  it('an abort throws RunAborted before anything is published, and keeps throwing', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-x' });
    client.ingestControl(decisionFor('run-x', 1, 'abort', { errorCode: 'global_circuit_breaker' }));
    await assert.rejects(run.beforeTool('exec', {}), (error: unknown) => {
      assert.ok(error instanceof RunAborted);
      assert.equal(error.decision.action, 'abort');
      assert.equal(error.message, 'global_circuit_breaker: abort because of a loop');
      return true;
    });
    await assert.rejects(run.beforeTool('exec', {}), RunAborted);
    await client.flush();
    assert.deepEqual(transport.events().map((e) => e.kind), ['run_started']);
  });

  it('deduplicates decisions by decision id and ignores other runs', async () => {
    const seen: string[] = [];
    const { client } = makeClient({
      waitBudgetMs: 0,
      onDecision: (d) => {
        seen.push(d.decisionId);
        throw new Error('a broken callback must not matter');
      },
    });
    const run = client.startRun({ agentId: 'agent', runId: 'run-d' });
    const block = decisionFor('run-d', 1, 'block', { detector: 'ping_pong' });
    client.ingestControl(block);
    client.ingestControl(block);
    client.ingestControl(decisionFor('someone-else', 1, 'abort'));
    client.ingestControl(watermarkFor('someone-else', 5));
    assert.deepEqual(seen, ['run-d:1:ping_pong:block']);
    assert.equal(client.decisions('run-d').length, 1);
    assert.equal((await run.beforeTool('exec', {})).allowed, false);
    assert.equal((await run.beforeTool('exec', {})).allowed, true);
    const stats = client.stats();
    assert.equal(stats.duplicates, 1);
    assert.equal(stats.otherRuns, 2);
  });

  it('hands each watermark of its own runs to onWatermark', async () => {
    const marks: [string, number][] = [];
    const { client } = makeClient({
      waitBudgetMs: 0,
      onWatermark: (w) => {
        marks.push([w.runId, w.seq]);
        throw new Error('a broken callback must not matter');
      },
    });
    client.startRun({ agentId: 'agent', runId: 'run-w' });
    client.ingestControl(watermarkFor('run-w', 2));
    client.ingestControl(watermarkFor('someone-else', 5));
    client.ingestControl(watermarkFor('run-w', 1)); // older: no progress, still heard
    assert.deepEqual(marks, [['run-w', 2], ['run-w', 1]]);
    assert.equal(client.watermark('run-w'), 2);
  });

  it('logs an observe-only decision once and never refuses or aborts on it', async () => {
    const { client, transport, logger } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-o' });
    const block = decisionFor('run-o', 1, 'block', { detector: 'generic_repeat', enforced: false });
    client.ingestControl(block);
    client.ingestControl(block); // redelivered: not logged again
    client.ingestControl(decisionFor('run-o', 1, 'warn', { detector: 'ping_pong', enforced: false }));
    client.ingestControl(decisionFor('run-o', 2, 'abort', { detector: 'generic_repeat', enforced: false }));
    const verdict = await run.beforeTool('exec', { command: 'ls' });
    assert.equal(verdict.allowed, true);
    assert.deepEqual(verdict.warnings, []);
    assert.equal((await run.beforeTool('exec', { command: 'ls' })).allowed, true);
    const lines = logger.at('warn').filter((line) => line.includes('observe only'));
    assert.equal(lines.length, 3);
    assert.match(lines[0], /run run-o \(agent agent\): observe only, loopguard would block the next tool call at seq 1: block because of a loop \[generic_repeat, decision run-o:1:generic_repeat:block\]/);
    assert.match(lines[1], /would warn at seq 1/);
    assert.match(lines[2], /would abort the run at seq 2/);
    assert.equal(client.decisions('run-o').length, 3);
    const stats = client.stats();
    assert.equal(stats.observed, 3);
    assert.equal(stats.duplicates, 1);
    assert.equal(stats.blocks + stats.aborts + stats.warningsDelivered, 0);
    await client.flush();
    assert.deepEqual(transport.events().map((e) => e.kind), ['run_started', 'tool_call', 'tool_call']);
    // The same decision enforced (another run) still blocks.
    const enforcedRun = client.startRun({ agentId: 'agent', runId: 'run-e' });
    client.ingestControl(decisionFor('run-e', 1, 'block', { detector: 'generic_repeat' }));
    assert.equal((await enforcedRun.beforeTool('exec', {})).allowed, false);
  });

  it('skips undecodable control messages with a warning', () => {
    const { client, logger } = makeClient();
    client.startRun({ agentId: 'agent', runId: 'run-u' });
    const junk = [null, Buffer.from('junk'), Buffer.from([0xc3, 0x01, 1, 2]), decisionFor('run-u', 1, 'warn').subarray(0, 30)];
    for (const value of junk) assert.doesNotThrow(() => client.ingestControl(value));
    assert.equal(client.stats().skippedControl, 4);
    assert.equal(client.decisions('run-u').length, 0);
    assert.ok(logger.at('warn').some((m) => m.startsWith('skipping undecodable control message')));
  });

  it('waits for the watermark of the previous cycle, then enforces what came with it', async () => {
    const { client } = makeClient({ waitBudgetMs: 2000 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-t' });
    await run.beforeTool('exec', { n: 1 }); // seq 2
    await run.afterTool('exec', { n: 1 }, { result: 'same' }); // seq 3
    setTimeout(() => {
      client.ingestControl(decisionFor('run-t', 2, 'block'));
      client.ingestControl(watermarkFor('run-t', 2)); // not enough: the call's result is seq 3
    }, 20);
    setTimeout(() => client.ingestControl(watermarkFor('run-t', 3)), 60);
    const started = Date.now();
    const verdict = await run.beforeTool('exec', { n: 1 });
    const waited = Date.now() - started;
    assert.ok(waited >= 50 && waited < 1500, `waited ${waited} ms`);
    assert.equal(verdict.allowed, false);
    assert.equal(verdict.timedOut, false);
    assert.equal(client.watermark('run-t'), 3);
    // Already confirmed: no wait for a run whose watermark is current.
    client.ingestControl(watermarkFor('run-t', run.seq));
    const again = Date.now();
    assert.equal((await run.beforeTool('exec', { n: 2 })).allowed, true);
    assert.ok(Date.now() - again < 100);
  });

  it("releases the waits of every run in one batch's RunWatermarks record (issue 24)", async () => {
    const { client } = makeClient({ waitBudgetMs: 10_000, failMode: 'closed' });
    const first = client.startRun({ agentId: 'agent', runId: 'run-m1' });
    const second = client.startRun({ agentId: 'agent', runId: 'run-m2' });
    for (const run of [first, second]) {
      await run.beforeTool('exec', { n: 1 }); // seq 2
      await run.afterTool('exec', { n: 1 }, { result: 'same' }); // seq 3
    }
    const verdicts = Promise.all([first.beforeTool('exec', { n: 1 }), second.beforeTool('exec', { n: 1 })]);
    assert.equal(client.stats().waits, 2, 'both calls wait for their run');
    client.ingestControl(decisionFor('run-m2', 2, 'block'));
    client.ingestControl(watermarksFor(['run-m1', 3], ['someone-else', 9], ['run-m2', 3]));
    const [one, two] = await verdicts;
    assert.deepEqual([one.allowed, one.timedOut], [true, false]);
    assert.deepEqual([two.allowed, two.timedOut, two.blockedBy?.runId], [false, false, 'run-m2']);
    assert.deepEqual([client.watermark('run-m1'), client.watermark('run-m2')], [3, 3]);
    const stats = client.stats();
    assert.equal(stats.watermarks, 2, 'each watermark of the batch counts as one RunWatermark would');
    assert.equal(stats.otherRuns, 1);
    assert.equal(stats.waitTimeouts, 0);
    // A batch never lowers a run's watermark (redelivered after a worker restart).
    client.ingestControl(watermarksFor(['run-m1', 1]));
    assert.equal(client.watermark('run-m1'), 3);
  });

  it("fails open on timeout: the call runs, the timeout is counted and logged", async () => {
    const { client, logger } = makeClient({ waitBudgetMs: 30, failMode: 'open' });
    const run = client.startRun({ agentId: 'agent' });
    await run.beforeTool('exec', {});
    const started = Date.now();
    const verdict = await run.beforeTool('exec', {});
    assert.ok(Date.now() - started >= 25);
    assert.deepEqual(verdict, { allowed: true, warnings: [], timedOut: true });
    assert.equal(client.stats().waitTimeouts, 1);
    assert.ok(logger.at('warn').some((m) => m.includes('allowing the call (failMode open)')));
  });

  it('fails closed on timeout: the call is refused like a block, with the reason', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 30, failMode: 'closed' });
    const run = client.startRun({ agentId: 'agent' });
    await run.beforeTool('exec', { a: 1 });
    const verdict = await run.beforeTool('exec', { a: 1 });
    assert.equal(verdict.allowed, false);
    assert.equal(verdict.timedOut, true);
    assert.equal(verdict.blockedBy, undefined);
    assert.match(verdict.reason ?? '', /loopguard did not answer within 30 ms/);
    await client.flush();
    const last = transport.events().at(-1) as ToolResultEvent;
    assert.equal(last.kind, 'tool_result');
    assert.equal(last.resultJson, '{"details": {"status": "blocked", "deniedReason": "guard-timeout"}}');
    assert.deepEqual(JSON.parse(last.resultJson ?? ''), GUARD_TIMEOUT_RESULT);
    const stats = client.stats();
    assert.equal(stats.waitTimeouts, 1);
    assert.equal(stats.failClosedRefusals, 1);
  });

  it('an abort arriving during the wait ends it at once', async () => {
    const { client } = makeClient({ waitBudgetMs: 5000 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-ab' });
    await run.beforeTool('exec', {});
    setTimeout(() => client.ingestControl(decisionFor('run-ab', 2, 'abort')), 20);
    const started = Date.now();
    await assert.rejects(run.beforeTool('exec', {}), RunAborted);
    assert.ok(Date.now() - started < 1000);
  });

  it('waitBudgetMs 0 never waits', async () => {
    const { client } = makeClient({ waitBudgetMs: 0, failMode: 'closed' });
    const run = client.startRun({ agentId: 'agent' });
    await run.beforeTool('exec', {});
    const verdict = await run.beforeTool('exec', {});
    assert.equal(verdict.allowed, true);
    assert.equal(client.stats().waits, 0);
  });

  it('logs publishing failures without throwing, and keeps a run in order', async () => {
    const { client, transport, logger } = makeClient({ waitBudgetMs: 0 });
    transport.failWith = new Error('broker gone');
    const run = client.startRun({ agentId: 'agent' });
    await run.beforeTool('exec', {});
    await run.end();
    assert.equal(client.stats().publishErrors, 3);
    assert.ok(logger.at('error').some((m) => m.includes('broker gone')));
    transport.failWith = undefined;
    transport.delayMs = 5;
    const second = client.startRun({ agentId: 'agent' });
    for (let i = 0; i < 5; i++) await second.afterTool('exec', { i });
    await second.end();
    assert.deepEqual(transport.events().map((e) => e.seq), [1, 2, 3, 4, 5, 6, 7]);
    assert.equal(client.stats().pendingSends, 0);
  });

  it('drops events beyond maxPendingSends instead of queueing without bound', async () => {
    const { client, transport, logger } = makeClient({ waitBudgetMs: 0, maxPendingSends: 3 });
    transport.delayMs = 20;
    const run = client.startRun({ agentId: 'agent' });
    for (let i = 0; i < 5; i++) await run.afterTool('exec', { i });
    await client.flush();
    assert.equal(client.stats().dropped, 3);
    assert.equal(client.stats().published, 3);
    assert.ok(logger.at('error').some((m) => m.includes('dropping an event')));
  });

  it('refuses unencodable input before publishing anything for it', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent' });
    await assert.rejects(run.beforeTool('ex\u0000ec', {}), EncodeError);
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    await assert.rejects(run.beforeTool('exec', circular), TypeError);
    assert.equal(run.seq, 1);
    await run.compaction();
    await run.end('aborted');
    assert.deepEqual(transport.events().map((e) => [e.kind, e.seq]), [
      ['run_started', 1],
      ['compaction_retry', 2],
      ['run_ended', 3],
    ]);
  });

  it('keeps the decisions of ended runs and closes idempotently', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-e' });
    client.ingestControl(decisionFor('run-e', 1, 'warn'));
    await run.end();
    client.ingestControl(decisionFor('run-e', 2, 'warn'));
    assert.equal(client.decisions('run-e').length, 2);
    assert.equal(client.stats().activeRuns, 0);
    await client.close();
    await client.close();
    assert.ok(transport.closed);
  });

  it('waitFor resolves when the predicate holds', async () => {
    const { client } = makeClient();
    client.startRun({ agentId: 'agent', runId: 'run-f' });
    setTimeout(() => client.ingestControl(decisionFor('run-f', 1, 'warn')), 10);
    const decisions = await client.waitFor('run-f', (d) => d.length === 1, 1000);
    assert.equal(decisions.length, 1);
    await assert.rejects(client.waitFor('run-f', (d) => d.length === 2, 30), /condition not met/);
  });
});
