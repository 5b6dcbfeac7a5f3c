// Issue 43: warnings worded for the model (the agent's loopguard config says
// `warnings: "model"`, so each decision carries `extra.model_note`). The plugin attaches a
// warning's note to the call's tool result through OpenClaw's tool-result middleware (the
// result before the model sees it), and a block's or an abort's note is the refusal text.
// Hooks through OpenClaw's own hook runner; the middleware called as OpenClaw calls it.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { RunAborted, ScriptedClient, loadIntoHookRunner, openclaw, plugin } from './helpers.mjs';

const CONFIG = { brokers: ['127.0.0.1:9'], gatewayId: 'gw-test', waitBudgetMs: 50, failMode: 'open' };
const NOTE = '[loopguard] You have called read with the same arguments 3 times with no progress, first noticed at this call.';
const ctxOf = (runId) => ({ agentId: 'coder', sessionKey: `agent:coder:explicit:s-${runId}`, sessionId: `s-${runId}`, runId });
const warning = (note) => ({ action: 'warn', detector: 'generic_repeat', reason: 'WARNING: ...', extra: note ? { model_note: note } : {} });

after(() => plugin.resetSharedGuard());

async function setup(decide) {
  const client = new ScriptedClient();
  client.decide = decide;
  const loaded = await loadIntoHookRunner({ config: CONFIG, connect: async () => client, abortRun: async () => true });
  return { client, ...loaded };
}

const call = (runner, runId, n) =>
  runner.runBeforeToolCall({ toolName: 'read', params: { path: 'loop.txt' }, runId, toolCallId: `call_${n}` }, { ...ctxOf(runId), toolName: 'read', toolCallId: `call_${n}` });
const resultFor = (middlewares, runId, n) =>
  middlewares[0].handler(
    { toolCallId: `call_${n}`, toolName: 'read', args: { path: 'loop.txt' }, result: { content: [{ type: 'text', text: 'hello' }], details: { ok: true } } },
    { runtime: 'openclaw', agentId: 'coder', runId },
  );

describe(`notes for the model through OpenClaw ${openclaw.version}'s hook runner`, () => {
  test('registers the tool-result middleware for the openclaw runtime', async () => {
    const { middlewares } = await setup(() => ({ allowed: true, warnings: [], timedOut: false }));
    assert.equal(middlewares.length, 1);
    assert.deepEqual(middlewares[0].options, { runtimes: ['openclaw'] });
  });

  test("a warning's note goes on the next tool result, once; other results are left alone", async () => {
    const { runner, middlewares } = await setup((runId, tool, args, n) => ({ allowed: true, warnings: n === 2 ? [warning(NOTE)] : [], timedOut: false }));
    assert.ok(!(await call(runner, 'run-n', 1))?.block);
    assert.equal(await resultFor(middlewares, 'run-n', 1), undefined);
    assert.ok(!(await call(runner, 'run-n', 2))?.block);
    const changed = await resultFor(middlewares, 'run-n', 2);
    assert.deepEqual(changed.result.content, [{ type: 'text', text: 'hello' }, { type: 'text', text: NOTE }]);
    assert.deepEqual(changed.result.details, { ok: true });
    assert.equal(await resultFor(middlewares, 'run-n', 2), undefined); // attached once
  });

  test('the result is published as the tool returned it, without the note', async () => {
    const { runner, middlewares, client } = await setup((runId, tool, args, n) => ({ allowed: true, warnings: n === 1 ? [warning(NOTE)] : [], timedOut: false }));
    await call(runner, 'run-p', 1);
    const changed = await resultFor(middlewares, 'run-p', 1);
    // OpenClaw hands after_tool_call the result the model got
    await runner.runAfterToolCall(
      { toolName: 'read', params: { path: 'loop.txt' }, runId: 'run-p', toolCallId: 'call_1', result: changed.result },
      { ...ctxOf('run-p'), toolName: 'read', toolCallId: 'call_1' },
    );
    const published = client.published.find((e) => e.kind === 'tool_result');
    assert.deepEqual(published.result, { content: [{ type: 'text', text: 'hello' }], details: { ok: true } });
    assert.deepEqual(plugin.withoutNote({ content: [{ type: 'text', text: `hello${NOTE}` }] }, NOTE), { content: [{ type: 'text', text: 'hello' }] });
  });

  test('a warning without a note (warnings: "log") changes no result', async () => {
    const { runner, middlewares, logger } = await setup(() => ({ allowed: true, warnings: [warning('')], timedOut: false }));
    await call(runner, 'run-l', 1);
    assert.equal(await resultFor(middlewares, 'run-l', 1), undefined);
    assert.ok(logger.lines.some((l) => l.includes('loopguard warning for run run-l')));
  });

  test("a block's note is the refusal text", async () => {
    const note = NOTE.replace('at this call.', 'at this call. loopguard refused this call: it did not run.');
    const { runner } = await setup(() => ({ allowed: false, warnings: [], blockedBy: { action: 'block', detector: 'generic_repeat', reason: 'CRITICAL: ...', extra: { model_note: note } }, reason: note, timedOut: false }));
    const refused = await call(runner, 'run-b', 1);
    assert.equal(refused.block, true);
    assert.equal(refused.blockReason, note);
  });

  test("an abort's note is the refusal text", async () => {
    const note = '[loopguard] You have spent 6000 tokens repeating calls that made no progress, going on since 10:00:00 UTC (5 calls ago). Finish with a short answer from what you already have. loopguard stopped this run: no further tool calls will run.';
    const { runner } = await setup(() => new RunAborted({ action: 'abort', detector: 'loop_budget', errorCode: 'loop_tokens_exceeded', reason: 'loop_tokens_exceeded: ...', extra: { model_note: note } }));
    const refused = await call(runner, 'run-x', 1);
    assert.equal(refused.block, true);
    assert.equal(refused.blockReason, note);
  });
});
