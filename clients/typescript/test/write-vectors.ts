/**
 * `npm run vectors`: writes clients/vectors/typescript.json, messages encoded by this package,
 * for the Python test tests/unit/gateway/test_cross_language_vectors.py to decode and re-encode
 * byte for byte.
 *
 * The events come from a scripted GatewayRun (the client's own path: JSON text of JS values,
 * seq numbering, block refusal, fail-closed refusal) plus codec-level edge cases. Output is
 * deterministic (fixed run ids and clock). Same format as python.json: wire field names, longs
 * as decimal strings, `hex` = the whole single-object message.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

import {
  type AgentEventInput,
  type DecisionInput,
  GatewayClient,
  type RunWatermark,
  SCHEMA_NAMES,
  decodeDecision,
  decodeEvent,
  decodeWatermark,
  decodeWatermarks,
  encodeDecision,
  encodeEvent,
  encodeWatermark,
  encodeWatermarks,
  eventSchemaJson,
  fingerprints,
  ownSchemas,
  pyJsonDumps,
} from '../src';
import { RecordingTransport, decisionFor } from './fakes';
import { toWire, vectorsDir } from './helpers';

const T0 = 1_767_225_600_000;

/** JS values a gateway might serialise (args/results), named. */
const JSON_VALUES: Record<string, unknown> = {
  command: { command: 'make test', cwd: '/repo', env: { CI: true } },
  unicode: { text: 'naïve café 日本語 🦀', rtl: 'שלום', escapes: 'q"b\\n\nt\tc\u0001d\u007f\u2028' },
  numbers: [0, -1, 1.5, 0.1, 1e-7, 123456789.125, 2 ** 53 - 1, 2 ** 60, 1e21, 1.7976931348623157e308, 5e-324, -0],
  bigints: [2n ** 64n, -(2n ** 63n)],
  non_finite: [NaN, Infinity, -Infinity],
  nested: { a: [1, [2, [3, { b: null }]]], e: {}, f: [] },
  js_only: { keep: 1, dropped: undefined, fn: () => 1, date: new Date(T0), list: [undefined] },
  null: null,
  string: 'just text',
  boolean: false,
};

async function clientEvents(): Promise<{ name: string; bytes: Buffer }[]> {
  const transport = new RecordingTransport();
  let now = T0;
  const client = GatewayClient.withTransport(
    { gatewayId: 'gw-ts', waitBudgetMs: 5, failMode: 'closed', logger: { warn() {}, error() {} }, clock: () => now++ },
    transport,
  );
  const run = client.startRun({ agentId: 'agent-ts', runId: 'ts-run-1' });
  // First call: nothing to wait for.
  await run.beforeTool('exec', JSON_VALUES.command, 'call_1');
  await run.afterTool('exec', JSON_VALUES.command, { result: { stdout: 'ok ✓', code: 0 }, toolCallId: 'call_1' });
  // A block that arrived with its watermark: refused, published as the loop veto.
  client.ingestControl(decisionFor('ts-run-1', 2, 'block'));
  client.ingestControl(encodeWatermark({ runId: 'ts-run-1', gatewayId: 'gw-ts', seq: 3, agentId: 'agent-ts', eventTime: T0 }));
  await run.beforeTool('read', { path: '/same' }, 'call_2');
  // Nothing confirms the veto: fail-closed refusal after the (5 ms) budget.
  await run.beforeTool('read', { path: '/same' }, 'call_3');
  await run.afterTool('write', JSON_VALUES.unicode, { error: 'EACCES: permission denied ✗' });
  await run.afterTool('calc', JSON_VALUES.numbers, { result: JSON_VALUES.bigints });
  await run.afterTool('odd', JSON_VALUES.js_only, { result: JSON_VALUES.non_finite });
  await run.compaction();
  await run.compaction('manual');
  await run.end('aborted');
  await client.flush();
  const names = [
    'client_run_started',
    'client_tool_call',
    'client_tool_result',
    'client_blocked_call',
    'client_loop_veto',
    'client_timeout_call',
    'client_guard_timeout',
    'client_error_result',
    'client_numbers_bigints',
    'client_js_only_non_finite',
    'client_compaction_default',
    'client_compaction_manual',
    'client_run_ended',
  ];
  const events = transport.sent.filter((s) => s.topic === 'loopguard.events');
  if (events.length !== names.length) throw new Error(`expected ${names.length} events, got ${events.length}`);
  return events.map((s, i) => ({ name: names[i], bytes: s.value }));
}

function codecEvents(): { name: string; bytes: Buffer }[] {
  const base = { runId: 'ts-run-2', agentId: 'agent-ts', gatewayId: 'gw-ts', eventTime: T0 };
  const cases: [string, AgentEventInput][] = [
    ['codec_big_seq_negative_time', { ...base, kind: 'run_started', seq: 2n ** 63n - 1n, eventTime: -(2n ** 63n) }],
    ['codec_zero', { ...base, kind: 'run_started', seq: 0, eventTime: 0 }],
    ['codec_default_args', { ...base, kind: 'tool_call', seq: 1, toolName: 'noop' }],
    ['codec_empty_strings', { ...base, kind: 'tool_call', seq: 2, agentId: '', gatewayId: '', toolName: '', argsJson: '{}', toolCallId: '' }],
    ['codec_unicode_ids', { ...base, kind: 'tool_call', seq: 3, runId: 'run-ü-🦀', agentId: 'agént', gatewayId: 'gw-日本', toolName: 'búsqueda', argsJson: pyJsonDumps(['ü', '🦀']), toolCallId: 'id-✓' }],
    ['codec_name_at_limit', { ...base, kind: 'tool_call', seq: 4, toolName: 'ü'.repeat(512) }],
    ['codec_result_all_null', { ...base, kind: 'tool_result', seq: 5, toolName: 'read' }],
    ['codec_run_ended_default', { ...base, kind: 'run_ended', seq: 6 }],
    ['codec_session_run_started', { ...base, kind: 'run_started', seq: 1, sessionId: 'sess-ü-2', trigger: 'heartbeat' }],
    ['codec_session_tool_call', { ...base, kind: 'tool_call', seq: 7, sessionId: 'sess-ü-2', toolName: 'ls' }],
    ['codec_tool_call_with_turn', { ...base, kind: 'tool_call', seq: 8, toolName: 'web_fetch', toolCallId: 'c-t', turnId: 'msg-ü-2' }],
  ];
  return cases.map(([name, event]) => ({ name, bytes: encodeEvent(event) }));
}

function decisions(): { name: string; input: DecisionInput; bytes: Buffer }[] {
  const base = { runId: 'ts-run-1', agentId: 'agent-ts', gatewayId: 'gw-ts', eventTime: T0, severity: 'warning' };
  const cases: [string, DecisionInput][] = [
    ['warn_minimal', { ...base, seq: 3, action: 'warn', detector: 'generic_repeat', count: 10, toolName: 'exec', reason: 'exec repeated 10 times' }],
    [
      'block_full',
      { ...base, severity: 'critical', seq: 7, action: 'block', detector: 'ping_pong', count: 20, toolName: 'read', reason: 'ping-pong ✗', argsHash: 'a'.repeat(64), resultHash: 'b'.repeat(64), pairedToolName: 'write', configVersion: 'v3', extra: { blocks: '1' } },
    ],
    [
      'abort_rich_extra',
      { ...base, severity: 'critical', seq: 9, action: 'abort', detector: 'global_circuit_breaker', count: 30, toolName: 'exec', reason: 'runaway', errorCode: 'global_circuit_breaker', extra: { ratio: 0.5, n: 3, big: 2 ** 60, huge: 12345678901234567890n, list: [1, 'x', null, true], nested: { k: { deep: [1.5e-7] } }, uni: 'é✓🦀', empty: {}, str: 'plain' } },
    ],
    ['abort_empty_strings', { runId: 'r', agentId: '', gatewayId: '', seq: 0, eventTime: 0, action: 'abort', detector: '', severity: '', count: 0, toolName: '', reason: '' }],
    ['warn_unicode_run_safe_max', { ...base, runId: 'run-ü-🦀', seq: 2 ** 53 - 1, action: 'warn', detector: 'known_poll_no_progress', count: 2 ** 40, toolName: 'process', reason: 'polling ✓' }],
    ['block_observe_only', { ...base, severity: 'critical', seq: 11, action: 'block', detector: 'generic_repeat', count: 20, toolName: 'exec', reason: 'exec repeated 20 times', configVersion: 'v4', enforced: false, extra: { blocks: '1' } }],
  ];
  return cases.map(([name, input]) => ({ name, input, bytes: encodeDecision(input) }));
}

function watermarks(): { name: string; bytes: Buffer }[] {
  const cases: [string, Record<string, unknown>][] = [
    ['first', { runId: 'ts-run-1', agentId: 'agent-ts', gatewayId: 'gw-ts', seq: 1, eventTime: T0 + 1, status: 'active', eventCount: 1 }],
    ['large_seq', { runId: 'ts-run-2', agentId: 'agent-ts', gatewayId: 'gw-ts', seq: 2 ** 53 - 1, eventTime: T0, status: 'ended', eventCount: 2 ** 40 }],
    ['unicode_run', { runId: 'run-ü-🦀', agentId: 'agént', gatewayId: 'gw-日本', seq: 42, eventTime: T0 + 42, status: 'aborted', eventCount: 41 }],
    ['defaults', { runId: 'ts-run-3', agentId: '', gatewayId: '', seq: 0, eventTime: 0 }],
  ];
  // Only the fields the schema has (it is still growing).
  const names = new Set(
    (ownSchemas().RunWatermark.type as unknown as { fields: { name: string }[] }).fields.map((f) =>
      f.name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
    ),
  );
  return cases.map(([name, values]) => ({
    name,
    bytes: encodeWatermark(Object.fromEntries(Object.entries(values).filter(([k]) => names.has(k))) as never),
  }));
}

/** RunWatermarks records (issue 24): what one worker batch publishes per control partition. */
function watermarkBatches(): { name: string; bytes: Buffer }[] {
  const base = { agentId: 'agent-ts', gatewayId: 'gw-ts', eventTime: T0 };
  const usage = { inputTokens: 120_000, outputTokens: 3_000, costUsd: 1.25, toolCalls: 4, loopTokens: 61_500, loopCostUsd: 0.625, loopCalls: 2, savedTokens: 1_200_000 };
  const cases: [string, RunWatermark[]][] = [
    [
      'two_runs_one_with_usage',
      [
        { ...base, runId: 'ts-run-1', seq: 3, status: 'active', eventCount: 3 },
        { ...base, runId: 'ts-run-2', seq: 9, status: 'aborted', eventCount: 9, ...usage },
      ],
    ],
    [
      'edge_values',
      [
        { runId: 'run-ü-🦀', agentId: 'agént', gatewayId: 'gw-日本', seq: 2 ** 53 - 1, eventTime: T0 + 42, status: 'ended', eventCount: 2 ** 40 },
        { runId: 'ts-run-3', agentId: '', gatewayId: '', seq: 0, eventTime: 0 },
      ],
    ],
    ['empty', []],
  ];
  return cases.map(([name, marks]) => ({ name, bytes: encodeWatermarks(marks) }));
}

async function main(): Promise<void> {
  const out = {
    generator: 'clients/typescript: npm run vectors (test/write-vectors.ts)',
    fingerprints: fingerprints(),
    canonical_forms: Object.fromEntries(SCHEMA_NAMES.map((n) => [n, ownSchemas()[n].canonicalForm])),
    event_schema: { key: ownSchemas().AgentEvent.fingerprint.toString('hex'), value: eventSchemaJson() },
    events: [...(await clientEvents()), ...codecEvents()].map(({ name, bytes }) => ({
      name,
      fields: toWire(decodeEvent(bytes)),
      hex: bytes.toString('hex'),
    })),
    decisions: decisions().map(({ name, bytes }) => {
      const decision = decodeDecision(bytes);
      return { name, fields: toWire(decision), extra_json: decision.extraJson, hex: bytes.toString('hex') };
    }),
    watermarks: watermarks().map(({ name, bytes }) => ({
      name,
      fields: toWire(decodeWatermark(bytes)),
      hex: bytes.toString('hex'),
    })),
    watermark_batches: watermarkBatches().map(({ name, bytes }) => ({
      name,
      watermarks: decodeWatermarks(bytes).map((watermark) => toWire(watermark)),
      hex: bytes.toString('hex'),
    })),
    json: Object.entries(JSON_VALUES).map(([name, value]) => ({ name, typescript: pyJsonDumps(value) })),
  };
  const file = path.join(vectorsDir(), 'typescript.json');
  fs.writeFileSync(file, `${JSON.stringify(out, null, 1)}\n`);
  console.log(
    `wrote ${file}: ${out.events.length} events, ${out.decisions.length} decisions, ${out.watermarks.length} watermarks, ` +
      `${out.watermark_batches.length} watermark batches, ${out.json.length} JSON texts`,
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
