// The plugin's hook logic, driven through OpenClaw's own global hook runner (the object the
// embedded runner calls: runBeforeToolCall, runAfterToolCall, runAgentEnd, runBeforeCompaction,
// ...) and OpenClaw's own agent event bus, with the loopguard client scripted at its boundary.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { RunAborted, ScriptedClient, eventually, loadIntoHookRunner, openclaw, plugin, sleep } from './helpers.mjs';

const CONFIG = { brokers: ['127.0.0.1:9'], gatewayId: 'gw-test', waitBudgetMs: 50, failMode: 'open' };
const ctxOf = (runId, extra = {}) => ({
  agentId: 'coder',
  sessionKey: `agent:coder:explicit:s-${runId}`,
  sessionId: `s-${runId}`,
  runId,
  ...extra,
});

after(() => plugin.resetSharedGuard());

async function setup({ config = CONFIG, decide, connect, abortRun } = {}) {
  const client = new ScriptedClient();
  if (decide) client.decide = decide;
  const aborts = [];
  const loaded = await loadIntoHookRunner({
    config,
    connect: connect ?? (async () => client),
    abortRun: abortRun ?? (async (sessionId) => (aborts.push(sessionId), true)),
  });
  return { client, aborts, ...loaded };
}

const call = (runner, runId, n, ctx = ctxOf(runId)) =>
  runner.runBeforeToolCall({ toolName: 'read', params: { path: 'loop.txt' }, runId, toolCallId: `call_${n}` }, { ...ctx, toolName: 'read', toolCallId: `call_${n}` });
const done = (runner, runId, n, outcome = { result: { content: [{ type: 'text', text: 'hi' }] } }, ctx = ctxOf(runId)) =>
  runner.runAfterToolCall({ toolName: 'read', params: { path: 'loop.txt' }, runId, toolCallId: `call_${n}`, ...outcome }, { ...ctx, toolName: 'read', toolCallId: `call_${n}` });

describe(`loopguard plugin through OpenClaw ${openclaw.version}'s hook runner`, () => {
  test('registers its hooks under the names OpenClaw dispatches', async () => {
    const { registry, runner } = await setup();
    const names = registry.typedHooks.map((h) => h.hookName).sort();
    for (const name of ['after_compaction', 'after_tool_call', 'agent_end', 'before_compaction', 'before_tool_call', 'session_end', 'session_start']) {
      assert.ok(names.includes(name), name);
      assert.ok(runner.hasHooks(name), `runner has ${name}`);
    }
  });

  test('an allowed call is published as ToolCall, its outcome as ToolResult, with the OpenClaw run id', async () => {
    const { runner, client } = await setup();
    const result = await call(runner, 'run-a', 1);
    assert.ok(!result?.block, 'not blocked');
    await done(runner, 'run-a', 1);
    await done(runner, 'run-a', 2, { error: 'ENOENT: no such file' }); // a failed call (never seen before: still published)
    await eventually(() => assert.equal(client.published.filter((e) => e.kind === 'tool_result').length, 2));
    assert.deepEqual(client.kinds('run-a'), ['run_started', 'tool_call', 'tool_result', 'tool_result']);
    const [started, toolCall, ok, failed] = client.published;
    assert.equal(started.agentId, 'coder');
    assert.deepEqual(toolCall, { runId: 'run-a', kind: 'tool_call', toolName: 'read', args: { path: 'loop.txt' }, toolCallId: 'call_1' });
    assert.deepEqual(ok.result, { content: [{ type: 'text', text: 'hi' }] });
    assert.equal(ok.error, null);
    assert.equal(failed.error, 'ENOENT: no such file');
    assert.equal(failed.result, undefined);
  });

  test('a block decision blocks the call with the decision reason; its after_tool_call is not republished', async () => {
    const decide = (_run, _tool, _args, n) =>
      n === 2
        ? { allowed: false, warnings: [], blockedBy: { action: 'block', detector: 'generic_repeat', reason: 'CRITICAL: read 5 times' }, reason: 'CRITICAL: read 5 times', timedOut: false }
        : { allowed: true, warnings: n === 1 ? [{ action: 'warn', detector: 'generic_repeat', reason: 'WARNING: read 3 times' }] : [], timedOut: false };
    const { runner, client, logger } = await setup({ decide });
    assert.ok(!(await call(runner, 'run-b', 1))?.block);
    const blocked = await call(runner, 'run-b', 2);
    assert.equal(blocked.block, true);
    assert.match(blocked.blockReason, /loopguard blocked this call: CRITICAL: read 5 times/);
    await done(runner, 'run-b', 2, { error: 'blocked' });
    await sleep(20);
    assert.deepEqual(client.kinds('run-b'), ['run_started', 'tool_call', 'tool_call', 'tool_result']);
    assert.ok(client.published.at(-1).refused, 'the only result of call 2 is the refusal the client published');
    assert.ok(logger.lines.some((l) => l.includes('WARNING: read 3 times')), 'warnings are logged');
  });

  test('an abort blocks the call, ends the loopguard run, aborts the OpenClaw run, and blocks every later call', async () => {
    const decision = { action: 'abort', detector: 'global_circuit_breaker', errorCode: 'loop_persisted_after_block', reason: 'Blocked 3 times; aborting the run.' };
    const decide = (_run, _tool, _args, n) => (n >= 2 ? new RunAborted(decision) : { allowed: true, warnings: [], timedOut: false });
    const { runner, client, aborts } = await setup({ decide });
    await call(runner, 'run-c', 1);
    const aborted = await call(runner, 'run-c', 2);
    assert.equal(aborted.block, true);
    assert.match(aborted.blockReason, /loopguard aborted this run \(loop_persisted_after_block\): Blocked 3 times/);
    assert.deepEqual(aborts, ['s-run-c']);
    const later = await call(runner, 'run-c', 3);
    assert.equal(later.block, true);
    assert.equal(later.blockReason, aborted.blockReason);
    await eventually(() => assert.deepEqual(client.kinds('run-c'), ['run_started', 'tool_call', 'run_ended']));
    assert.equal(client.published.at(-1).status, 'aborted');
    // other runs are not affected
    assert.ok(!(await call(runner, 'run-c2', 1))?.block);
  });

  test('observe-only decisions (mode "observe") are logged once and never block or abort', async () => {
    // The real @loopguard/client behind the plugin, fed control messages as the worker sends them.
    const { GatewayClient, encodeDecision } = await import('@loopguard/client');
    const transport = { sent: [], async send(topic, key, value) { this.sent.push({ topic, key, value }); }, async close() {} };
    let real;
    const connect = async (options) => (real = GatewayClient.withTransport({ ...options, waitBudgetMs: 0 }, transport));
    const { runner, logger, aborts } = await setup({ connect });
    assert.ok(!(await call(runner, 'run-o', 1))?.block);
    const observed = (seq, action, detector) =>
      encodeDecision({ runId: 'run-o', agentId: 'coder', gatewayId: 'gw-test', seq, eventTime: 1, action, detector, severity: 'critical', count: 20, toolName: 'read', reason: `${action}: read 20 times`, enforced: false });
    real.ingestControl(observed(2, 'block', 'generic_repeat'));
    real.ingestControl(observed(2, 'block', 'generic_repeat')); // redelivered
    assert.ok(!(await call(runner, 'run-o', 2))?.block, 'an observe-only block lets the call run');
    real.ingestControl(observed(3, 'abort', 'generic_repeat'));
    for (const n of [3, 4]) assert.ok(!(await call(runner, 'run-o', n))?.block, 'an observe-only abort lets the run go on');
    assert.deepEqual(aborts, [], 'the OpenClaw run was not aborted');
    const shadow = logger.lines.filter((l) => l.includes('observe only'));
    assert.equal(shadow.length, 2, shadow.join('\n'));
    assert.match(shadow[0], /^warn run run-o \(agent coder\): observe only, loopguard would block the next tool call at seq 2: block: read 20 times/);
    assert.match(shadow[1], /would abort the run at seq 3/);
    assert.ok(!logger.lines.some((l) => /loopguard (block|abort) \(/.test(l)), 'no line reads as if enforced');
    assert.equal(real.stats().observed, 2);
    // An enforced block on the same client still blocks.
    real.ingestControl(encodeDecision({ runId: 'run-o', agentId: 'coder', gatewayId: 'gw-test', seq: 9, eventTime: 1, action: 'block', detector: 'ping_pong', severity: 'critical', count: 20, toolName: 'read', reason: 'CRITICAL: ping-pong' }));
    assert.equal((await call(runner, 'run-o', 5)).block, true);
  });

  test('abort without a way to stop the OpenClaw run still blocks every further call', async () => {
    const decide = () => new RunAborted({ action: 'abort', detector: 'post_compaction_guard', errorCode: 'compaction_loop_persisted', reason: 'same call after compaction' });
    const { runner, logger } = await setup({
      decide,
      abortRun: async () => {
        throw new Error('no active run');
      },
    });
    for (const n of [1, 2, 3]) assert.equal((await call(runner, 'run-d', n)).block, true);
    assert.ok(logger.lines.some((l) => l.includes('blocking its further tool calls instead')));
  });

  test('compaction inside a run is published once as CompactionRetry(context_overflow), also from derived compaction run ids', async () => {
    const { runner, client } = await setup();
    await call(runner, 'run-e', 1);
    const ctx = ctxOf('run-e');
    const compactionCtx = { sessionKey: ctx.sessionKey, sessionId: ctx.sessionId, agentId: 'coder' }; // OpenClaw passes no runId here
    await runner.runBeforeCompaction({ messageCount: 10 }, compactionCtx);
    await runner.runAfterCompaction({ messageCount: 3, compactedCount: 7 }, { ...compactionCtx, runId: 'run-e:compaction:ovf-1' });
    await call(runner, 'run-e', 2);
    // the embedded runner's own compaction events on the agent bus (derived run id)
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-e:compaction:ovf-2', stream: 'compaction', data: { phase: 'start' } });
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-e:compaction:ovf-2', stream: 'compaction', data: { phase: 'end', completed: true, willRetry: true } });
    await eventually(() => assert.equal(client.published.filter((e) => e.kind === 'compaction_retry').length, 2));
    assert.deepEqual(client.kinds('run-e'), ['run_started', 'tool_call', 'compaction_retry', 'tool_call', 'compaction_retry']);
    assert.ok(client.published.filter((e) => e.kind === 'compaction_retry').every((e) => e.trigger === 'context_overflow' && e.runId === 'run-e'));
    assert.equal(client.published.filter((e) => e.runId !== 'run-e').length, 0, 'no run for a derived id');
  });

  test('compaction outside any tracked run is not published', async () => {
    const { runner, client } = await setup();
    await runner.runBeforeCompaction({ messageCount: 10 }, { sessionKey: 'agent:main:main', sessionId: 'idle' });
    await runner.runAfterCompaction({ messageCount: 3, compactedCount: 7 }, { sessionKey: 'agent:main:main', sessionId: 'idle' });
    assert.equal(client.published.length, 0);
  });

  test("an attempt's end is provisional: the run resumes after a retry; the agent command's terminal event ends it", async () => {
    const { runner, client } = await setup();
    await call(runner, 'run-f', 1);
    await runner.runAgentEnd({ runId: 'run-f', success: false, error: 'context overflow', messages: [] }, ctxOf('run-f'));
    await call(runner, 'run-f', 2); // the retry after compaction: same run
    await runner.runAgentEnd({ runId: 'run-f', success: true, messages: [] }, ctxOf('run-f'));
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-f', stream: 'lifecycle', data: { phase: 'end', startedAt: Date.now() - 5, endedAt: Date.now() } });
    await eventually(() => assert.deepEqual(client.kinds('run-f'), ['run_started', 'tool_call', 'tool_call', 'run_ended']));
    assert.equal(client.published.at(-1).status, 'completed');
    // ended runs start afresh only as a new run id
    assert.ok(!(await call(runner, 'run-g', 1))?.block);
    assert.equal(client.published.filter((e) => e.kind === 'run_started').length, 2);
  });

  test('gateway_stop ends a run whose attempt ended with that status, an open one as gateway_stop', async () => {
    const { runner, client } = await setup();
    await call(runner, 'run-p', 1);
    await call(runner, 'run-q', 1);
    await runner.runAgentEnd({ runId: 'run-p', success: true, messages: [] }, ctxOf('run-p'));
    await sleep(20);
    assert.deepEqual(client.kinds('run-p'), ['run_started', 'tool_call'], 'an attempt end waits for its grace period');
    await runner.runGatewayStop({ reason: 'test' }, {});
    await eventually(() => assert.equal(client.published.filter((e) => e.kind === 'run_ended').length, 2));
    const ends = Object.fromEntries(client.published.filter((e) => e.kind === 'run_ended').map((e) => [e.runId, e.status]));
    assert.deepEqual(ends, { 'run-p': 'completed', 'run-q': 'gateway_stop' });
    assert.equal(client.closed, true);
  });

  test('activity after a published end is reported (the worker would drop a restarted run)', async () => {
    const { runner, client, logger } = await setup();
    await call(runner, 'run-r', 1);
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-r', stream: 'lifecycle', data: { phase: 'end', startedAt: Date.now() - 5, endedAt: Date.now() } });
    await eventually(() => assert.deepEqual(client.kinds('run-r').at(-1), 'run_ended'));
    await call(runner, 'run-r', 2);
    assert.ok(logger.lines.some((l) => l.startsWith('warn') && l.includes('run run-r shows activity after its end was published')), logger.lines.join('\n'));
  });

  test('session_end ends the run still open on that session', async () => {
    const { runner, client } = await setup();
    await call(runner, 'run-h', 1);
    const ctx = ctxOf('run-h');
    await runner.runSessionEnd({ sessionId: ctx.sessionId, sessionKey: ctx.sessionKey, messageCount: 4, reason: 'reset' }, { sessionId: ctx.sessionId, sessionKey: ctx.sessionKey, agentId: 'coder' });
    await eventually(() => assert.deepEqual(client.kinds('run-h').at(-1), 'run_ended'));
    assert.equal(client.published.at(-1).status, 'session_reset');
  });

  test('the lifecycle start and model calls start the run before its first tool call', async () => {
    const { runner, client } = await setup();
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-i', stream: 'lifecycle', sessionKey: 'agent:ops:main', data: { phase: 'start', startedAt: Date.now() } });
    await eventually(() => assert.deepEqual(client.kinds('run-i'), ['run_started']));
    assert.equal(client.published[0].agentId, 'ops', 'agent id from the session key');
    await runner.runModelCallStarted({ runId: 'run-j', callId: 'c', sessionKey: 'agent:main:x', provider: 'p', model: 'm' }, { runId: 'run-j' });
    await eventually(() => assert.deepEqual(client.kinds('run-j'), ['run_started']));
  });

  test('a run carries its session key as its loopguard session, and the trigger that started it', async () => {
    const { runner, client } = await setup();
    await runner.runModelCallStarted(
      { runId: 'run-k', callId: 'c', sessionKey: 'agent:coder:main', provider: 'p', model: 'm' },
      { runId: 'run-k', agentId: 'coder', sessionKey: 'agent:coder:main', sessionId: 'uuid-1', trigger: 'heartbeat' },
    );
    await call(runner, 'run-l', 1, ctxOf('run-l', { sessionKey: 'agent:coder:main' })); // a tool hook: no trigger
    await eventually(() => assert.equal(client.published.filter((e) => e.kind === 'run_started').length, 2));
    const started = Object.fromEntries(client.published.filter((e) => e.kind === 'run_started').map((e) => [e.runId, e]));
    assert.deepEqual([started['run-k'].sessionId, started['run-k'].trigger], ['agent:coder:main', 'heartbeat']);
    assert.deepEqual([started['run-l'].sessionId, started['run-l'].trigger], ['agent:coder:main', null]);
  });

  test('unreachable Kafka: calls are allowed quickly (failMode open) and the failure is logged', async () => {
    const { runner, logger } = await setup({
      config: { ...CONFIG, connectWaitMs: 200 },
      connect: async () => {
        await sleep(50);
        throw new Error('KafkaJSConnectionError: connect ECONNREFUSED 127.0.0.1:9');
      },
    });
    const started = Date.now();
    for (const n of [1, 2, 3]) assert.ok(!(await call(runner, 'run-k', n))?.block);
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
    assert.ok(logger.lines.some((l) => l.includes('cannot reach Kafka') && l.includes('failing open')));
  });

  test('unreachable Kafka with failMode closed: calls are blocked with a reason', async () => {
    const { runner } = await setup({
      config: { ...CONFIG, failMode: 'closed', connectWaitMs: 100 },
      connect: async () => {
        throw new Error('ECONNREFUSED');
      },
    });
    const r = await call(runner, 'run-l', 1);
    assert.equal(r.block, true);
    assert.match(r.blockReason, /loopguard unavailable \(not connected to Kafka\); failMode is closed/);
  });

  test('a connection that hangs costs a run one bounded wait, not one per call', async () => {
    const { runner } = await setup({ config: { ...CONFIG, connectWaitMs: 150 }, connect: () => new Promise(() => {}) });
    let t = Date.now();
    await call(runner, 'run-m', 1);
    assert.ok(Date.now() - t >= 140, 'first call waited for the connection');
    t = Date.now();
    await call(runner, 'run-m', 2);
    assert.ok(Date.now() - t < 100, 'second call did not');
  });

  test('a client error never reaches OpenClaw: open allows, closed blocks', async () => {
    const boom = () => new Error('encoder exploded');
    for (const [failMode, blocked] of [
      ['open', false],
      ['closed', true],
    ]) {
      const { runner, logger } = await setup({ config: { ...CONFIG, failMode }, decide: boom });
      const r = await call(runner, `run-n-${failMode}`, 1);
      assert.equal(Boolean(r?.block), blocked, failMode);
      assert.ok(logger.lines.some((l) => l.includes('before_tool_call failed') && l.includes('encoder exploded')));
      await done(runner, `run-n-${failMode}`, 1); // and after_tool_call with a broken client neither
    }
  });

  test('no brokers configured: inert, logs once', async () => {
    const { runner, logger } = await setup({ config: {} });
    for (const n of [1, 2]) assert.ok(!(await call(runner, 'run-o', n))?.block);
    assert.equal(logger.lines.filter((l) => l.includes('no brokers configured')).length, 1);
  });

  test('several registrations (full, discovery, tool-discovery) share one guard and one connection', async () => {
    await plugin.resetSharedGuard();
    let connects = 0;
    const client = new ScriptedClient();
    const entry = plugin.createLoopguardPlugin({ connect: async () => (connects++, client), abortRun: async () => true });
    const registries = [];
    for (const mode of ['full', 'discovery', 'tool-discovery']) {
      const registry = { plugins: [], hooks: [], typedHooks: [], trustedToolPolicies: [] };
      entry.register({
        id: 'loopguard',
        registrationMode: mode,
        pluginConfig: CONFIG,
        logger: console,
        on: (hookName, handler) => registry.typedHooks.push({ pluginId: 'loopguard', hookName, handler, priority: 0, source: 'test' }),
        runtime: { events: { onAgentEvent: openclaw.harnessRuntime.onAgentEvent } },
      });
      registries.push(registry);
    }
    // OpenClaw dispatches to the most recently activated registry
    openclaw.hookRuntime.initializeGlobalHookRunner(registries.at(-1));
    const runner = openclaw.pluginRuntime.getGlobalHookRunner();
    await call(runner, 'run-p', 1);
    openclaw.hookRuntime.initializeGlobalHookRunner(registries[0]);
    await call(openclaw.pluginRuntime.getGlobalHookRunner(), 'run-p', 2);
    assert.equal(connects, 1);
    assert.deepEqual(client.kinds('run-p'), ['run_started', 'tool_call', 'tool_call']);
  });
  test('llm_output usage is handed to the loopguard run (issue 28): cache reads count as read, the cost where the message has one', async () => {
    const { client, runner } = await setup();
    await call(runner, 'run-u', 1);
    await eventually(() => assert.ok(client.kinds('run-u').includes('tool_call')));
    const usage = { input: 1000, output: 40, cacheRead: 500, cacheWrite: 0, total: 1540 };
    const lastAssistant = { role: 'assistant', usage: { cost: { total: 0.0123 } } };
    await runner.runLlmOutput(
      { runId: 'run-u', sessionId: 's-run-u', provider: 'p', model: 'm', assistantTexts: [], lastAssistant, usage },
      ctxOf('run-u'),
    );
    await eventually(() => assert.ok(client.kinds('run-u').includes('usage')));
    const reported = client.published.find((e) => e.runId === 'run-u' && e.kind === 'usage');
    assert.deepEqual(
      { inputTokens: reported.inputTokens, outputTokens: reported.outputTokens, costUsd: reported.costUsd },
      { inputTokens: 1500, outputTokens: 40, costUsd: 0.0123 },
    );
  });

  test("a model call's usage reported after its run ended is dropped, never a restart of the run", async () => {
    const { runner, client } = await setup();
    await call(runner, 'run-w', 1);
    await runner.runAgentEnd({ runId: 'run-w', success: true, messages: [] }, ctxOf('run-w'));
    openclaw.harnessRuntime.emitAgentEvent({ runId: 'run-w', stream: 'lifecycle', data: { phase: 'end', startedAt: Date.now() - 5, endedAt: Date.now() } });
    await eventually(() => assert.deepEqual(client.kinds('run-w'), ['run_started', 'tool_call', 'run_ended']));
    const usage = { input: 10, output: 2, cacheRead: 0, cacheWrite: 0, total: 12 };
    await runner.runLlmOutput({ runId: 'run-w', sessionId: 's-run-w', provider: 'p', model: 'm', assistantTexts: [], usage }, ctxOf('run-w'));
    await sleep(20);
    assert.deepEqual(client.kinds('run-w'), ['run_started', 'tool_call', 'run_ended']);
  });
});
