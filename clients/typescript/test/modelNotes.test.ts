// Issue 43: a decision worded for the model (`warnings: "model"` in the agent's loopguard
// config; the worker's core puts the note in `extra.model_note`) reaches the host as the note
// to attach to the call's tool result, and as a block's or an abort's refusal text.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { MODEL_NOTE, RunAborted, modelNote, modelNotes } from '../src';
import { decisionFor, makeClient } from './fakes';

// The note streams/core/model_notes.py words for an error_repeat abort (its test pins it).
const NOTE =
  '[loopguard] You have called exec 4 times and it failed the same way each time, going on since 22:13:20 UTC. ' +
  'Retrying will fail the same way: read the error and fix its cause first, or stop and report ' +
  'the error. loopguard stopped this run: no further tool calls will run.';
const WARN_NOTE = '[loopguard] You have called exec with the same arguments 3 times with no progress, first noticed at 10:02:03 UTC.';

describe('notes for the model', () => {
  it('reads the key the worker writes', () => {
    assert.equal(MODEL_NOTE, 'model_note');
    assert.equal(modelNote({ extra: { model_note: NOTE } }), NOTE);
    assert.equal(modelNote({ extra: { blocks: 3 } }), '');
    assert.equal(modelNote(undefined), '');
    assert.equal(modelNotes([{ extra: { model_note: 'a' } }, { extra: {} }, { extra: { model_note: 'b' } }]), 'a\n\nb');
  });

  it("hands a warning's note over with the next verdict, once", async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-n1' });
    client.ingestControl(decisionFor('run-n1', 1, 'warn', { extra: { model_note: WARN_NOTE } }));
    const first = await run.beforeTool('exec', {});
    assert.equal(first.allowed, true);
    assert.equal(first.modelNote, WARN_NOTE);
    assert.equal((await run.beforeTool('exec', {})).modelNote, undefined);
  });

  it("makes a block's note its refusal text", async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-n2' });
    const note = `${WARN_NOTE} loopguard refused this call: it did not run.`;
    client.ingestControl(decisionFor('run-n2', 1, 'block', { extra: { model_note: note } }));
    const refused = await run.beforeTool('exec', {});
    assert.equal(refused.allowed, false);
    assert.equal(refused.reason, note);
  });

  it("puts an abort's note on RunAborted", async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-n3' });
    client.ingestControl(decisionFor('run-n3', 1, 'abort', { extra: { model_note: NOTE } }));
    await assert.rejects(run.beforeTool('exec', {}), (error: unknown) => error instanceof RunAborted && error.modelNote === NOTE);
  });

  it('without notes reads as before', async () => {
    const { client } = makeClient({ waitBudgetMs: 0 });
    const run = client.startRun({ agentId: 'agent', runId: 'run-n4' });
    client.ingestControl(decisionFor('run-n4', 1, 'warn'));
    const verdict = await run.beforeTool('exec', {});
    assert.equal(verdict.modelNote, undefined);
    assert.equal('modelNote' in verdict, false);
  });
});
