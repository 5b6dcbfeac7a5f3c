import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ABORT_DETECTOR, KeyRing, RELEASE_DETECTOR, RunAborted, decodeEvent, decodeOperatorCommand } from '../src';
import { type RecordingTransport, decisionFor, makeClient } from './fakes';

/** A block of an agent with `onBlock: "hold"`, as the worker marks it (streams/core/hold.py). */
function heldBlock(runId: string, seq: number, holdDefault = 'refuse', seconds = 300): Buffer {
  return decisionFor(runId, seq, 'block', {
    detector: 'generic_repeat',
    extra: { on_block: 'hold', hold_timeout_seconds: seconds, hold_default: holdDefault },
  });
}

/** Resolves once `ready()` holds, checking after each turn of the event loop. */
async function until(ready: () => boolean): Promise<void> {
  while (!ready()) await new Promise((resolve) => setImmediate(resolve));
}

function commandsSent(transport: RecordingTransport) {
  return transport.sent.filter((s) => s.topic === 'loopguard.events').flatMap((s) => {
    try {
      decodeEvent(s.value);
      return [];
    } catch {
      return [decodeOperatorCommand(s.value)];
    }
  });
}

describe('hold instead of fail (issue 43)', () => {
  it('holds a blocked call until an operator releases the run, then lets it through', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-h' });
    client.ingestControl(heldBlock('run-h', 1));
    const pending = run.beforeTool('exec', { command: 'make' });
    await until(() => run.holding !== undefined);
    assert.equal(run.holding?.extra?.on_block, 'hold');
    await client.flush();
    assert.deepEqual(transport.events().map((e) => e.kind), ['run_started']); // the held call waits
    client.ingestControl(decisionFor('run-h', 1, 'warn', { detector: RELEASE_DETECTOR, reason: 'released by bob: ok' }));
    const verdict = await pending;
    assert.equal(verdict.allowed, true);
    assert.equal(verdict.blockedBy, undefined);
    assert.equal(run.holding, undefined);
    assert.equal(run.holds, 1);
    await client.flush();
    assert.deepEqual(transport.events().map((e) => e.kind), ['run_started', 'tool_call']); // no veto
  });

  it('an operator abort of a held call throws RunAborted', async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-x' });
    client.ingestControl(heldBlock('run-x', 1));
    const pending = run.beforeTool('exec', { command: 'make' });
    await until(() => run.holding !== undefined);
    client.ingestControl(decisionFor('run-x', 1, 'abort', { detector: ABORT_DETECTOR, reason: 'aborted by ann: runaway' }));
    await assert.rejects(pending, (error: unknown) => error instanceof RunAborted && error.decision.detector === ABORT_DETECTOR);
  });

  it('with no answer in time publishes holdDefault and obeys the worker\'s answer', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'impatient', runId: 'run-d', sessionId: 'sess-d' });
    client.ingestControl(heldBlock('run-d', 1, 'abort', 0.05));
    const pending = run.beforeTool('exec', { command: 'make' });
    await until(() => commandsSent(transport).length > 0);
    const [command] = commandsSent(transport);
    assert.equal(command.command, 'abort');
    assert.equal(command.source, 'hold');
    assert.equal(command.runId, 'run-d');
    assert.equal(command.sessionId, 'sess-d');
    assert.equal(command.releasedBy, 'gateway gw-ts');
    assert.match(command.reason, /holdDefault abort/);
    assert.equal(transport.sent.find((s) => s.value.equals(transport.sent.at(-1)!.value))?.key, 'sess-d');
    client.ingestControl(decisionFor('run-d', 1, 'abort', { detector: ABORT_DETECTOR }));
    await assert.rejects(pending, RunAborted);
  });

  it('signs its holdDefault command with its own key (a worker with keys takes it for its own run)', async () => {
    const keys = { k1: 'hold-gateway-secret-0123456789' };
    const ring = KeyRing.of(keys);
    const { client, transport } = makeClient({ waitBudgetMs: 0, signingKeys: keys });
    const run = client.startRun({ agentId: 'lenient', runId: 'run-k' });
    const block = heldBlock('run-k', 1, 'release', 0.05);
    client.ingestControl(block, 'control', ring.headers(block)); // the worker signs for this gateway
    const pending = run.beforeTool('exec', { command: 'make' });
    await until(() => commandsSent(transport).length > 0);
    const sent = transport.sent.filter((s) => s.topic === 'loopguard.events').at(-1)!;
    assert.equal(decodeOperatorCommand(sent.value).command, 'release');
    assert.equal(ring.check(sent.headers, sent.value), '');
    const release = decisionFor('run-k', 1, 'warn', { detector: RELEASE_DETECTOR });
    client.ingestControl(release, 'control', ring.headers(release));
    assert.equal((await pending).allowed, true);
  });

  it('with no answer and holdDefault refuse, refuses the call as a block does', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-r' });
    client.ingestControl(heldBlock('run-r', 1, 'refuse', 0.05));
    const verdict = await run.beforeTool('exec', { command: 'make' });
    assert.equal(verdict.allowed, false);
    assert.equal(verdict.blockedBy?.detector, 'generic_repeat');
    assert.deepEqual(commandsSent(transport), []);
  });

  it('a release that arrives before the next call lifts the pending block', async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-l' });
    client.ingestControl(decisionFor('run-l', 1, 'block'));
    client.ingestControl(decisionFor('run-l', 1, 'warn', { detector: RELEASE_DETECTOR }));
    const verdict = await run.beforeTool('exec', { command: 'make' });
    assert.equal(verdict.allowed, true);
    assert.deepEqual(verdict.warnings.map((d) => d.detector), [RELEASE_DETECTOR]);
  });
});
