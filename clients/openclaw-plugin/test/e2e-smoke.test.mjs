// Smoke test of the e2e harness: the real OpenClaw runs one headless agent turn against the
// scripted model server with the plugin loaded and Kafka unreachable; the plugin must see every
// tool call and fail open. (With a broker and worker, see README: the Python suite drives
// e2e/run-e2e.mjs with LOOPGUARD_TEST_BOOTSTRAP.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';

test('real OpenClaw turn, broker unreachable: every call reaches the plugin and is allowed (fail open)', () => {
  const r = spawnSync(process.execPath, [path.join(import.meta.dirname, '..', 'e2e', 'run-e2e.mjs'), '--max-tool-calls', '3', '--timeout', '120'], {
    encoding: 'utf8',
    env: { ...process.env, LOOPGUARD_TEST_BOOTSTRAP: '127.0.0.1:9' },
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ok, true);
  assert.equal(out.openclaw.ok, true, JSON.stringify(out.openclaw));
  assert.equal(out.toolCalls.requestedByModel, 3);
  assert.equal(out.toolCalls.seenByPlugin, 3);
  assert.equal(out.toolCalls.allowedFailOpen, 3);
  assert.equal(out.toolCalls.executed, 3);
  assert.equal(out.plugin.connected, false);
  assert.ok(out.plugin.connectFailures.length >= 1);
  assert.deepEqual(out.toolResultsSeenByModel, ['hello from the loop\n', 'hello from the loop\n', 'hello from the loop\n']);
  assert.equal(out.abort, null);
});
