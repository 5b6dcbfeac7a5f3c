import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  type DecisionInput,
  HEADER_SIZE,
  MARKER,
  SchemaRegistry,
  crc64Avro,
  decodeControl,
  decodeDecision,
  decodeEvent,
  decodeWatermark,
  decodeWatermarks,
  encodeDecision,
  encodeEvent,
  encodeWatermark,
  encodeWatermarks,
  ownSchemas,
  parsingCanonicalForm,
  schemaFingerprint,
} from '../src';
import { previousSchemas } from '../src/schemas';

const base = { runId: 'run-1', agentId: 'agent', gatewayId: 'gw', seq: 1, eventTime: 1_767_225_600_000 };
const decision: DecisionInput = {
  ...base,
  seq: 4,
  action: 'block',
  detector: 'ping_pong',
  severity: 'critical',
  count: 20,
  toolName: 'read',
  reason: 'loop',
  extra: { blocks: '1', n: 2, nested: { a: [1.5, null] } },
};

describe('CRC-64-AVRO', () => {
  it('matches the Avro spec on known inputs', () => {
    // Empty input gives the EMPTY constant; "null" is the Java reference value.
    assert.equal(crc64Avro(Buffer.alloc(0)), 0xc15d213aa4d7a795n);
    assert.equal(schemaFingerprint('"null"').readBigUInt64LE(), 0x63dd24e7cc258f8an); // 7195948357588979594
    assert.equal(schemaFingerprint('"null"').toString('hex'), '8a8f25cce724dd63'); // little-endian on the wire
  });

  it('drops logical types, docs and defaults from the canonical form', () => {
    const withExtras = {
      type: 'record',
      name: 'R',
      namespace: 'ns',
      doc: 'x',
      fields: [{ name: 't', type: { type: 'long', logicalType: 'timestamp-millis' }, doc: 'y', default: 0 }],
    };
    assert.equal(parsingCanonicalForm(withExtras), '{"name":"ns.R","type":"record","fields":[{"name":"t","type":"long"}]}');
  });
});

describe('events', () => {
  it('round-trips every kind with defaults filled in', () => {
    const cases = [
      { ...base, kind: 'tool_call', toolName: 'exec' },
      { ...base, kind: 'tool_result', toolName: 'exec', error: 'boom' },
      { ...base, kind: 'compaction_retry' },
      { ...base, kind: 'run_started' },
      { ...base, kind: 'run_ended', status: 'aborted' },
    ] as const;
    const expected = [
      { argsJson: '{}', toolCallId: null },
      { argsJson: null, resultJson: null, toolCallId: null },
      { trigger: 'context_overflow' },
      {},
      {},
    ];
    cases.forEach((event, i) => {
      const bytes = encodeEvent(event);
      assert.deepEqual(bytes.subarray(0, 2), Buffer.from([0xc3, 0x01]));
      assert.ok(bytes.subarray(2, HEADER_SIZE).equals(ownSchemas().AgentEvent.fingerprint));
      assert.deepEqual(decodeEvent(bytes), { ...expected[i], ...event });
    });
  });

  it('carries the session id and the run trigger, and leaves them out when unset', () => {
    const started = { ...base, kind: 'run_started' as const, sessionId: 'sess-1', trigger: 'compaction' };
    assert.deepEqual(decodeEvent(encodeEvent(started)), started);
    const call = { ...base, kind: 'tool_call' as const, toolName: 'ls', sessionId: 'sess-1' };
    assert.deepEqual(decodeEvent(encodeEvent(call)), { ...call, argsJson: '{}', toolCallId: null });
    const plain = decodeEvent(encodeEvent({ ...base, kind: 'run_started', sessionId: null }));
    assert.ok(!('sessionId' in plain) && !('trigger' in plain));
    assert.throws(() => encodeEvent({ ...call, sessionId: 's\u0000' }), { name: 'EncodeError', message: /session_id contains a NUL/ });
  });

  it('carries the turn id of a call (issue 44), and leaves it out when unset', () => {
    const call = { ...base, kind: 'tool_call' as const, toolName: 'web_fetch', argsJson: '{"url": "https://a"}', toolCallId: 'c-1', turnId: 'msg-ü-1' };
    assert.deepEqual(decodeEvent(encodeEvent(call)), call);
    const plain = decodeEvent(encodeEvent({ ...call, turnId: null }));
    assert.ok(!('turnId' in plain));
    assert.throws(() => encodeEvent({ ...call, turnId: 'm\u0000' }), { name: 'EncodeError', message: /turn_id contains a NUL/ });
    assert.throws(() => encodeEvent({ ...call, turnId: 't'.repeat(1025) }), { name: 'EncodeError', message: /turn_id is 1025 bytes/ });
  });

  it('reads a call written before the turn id (AgentEvent.v3) as one without it', () => {
    const v3 = previousSchemas()['AgentEvent.v3'];
    const datum = {
      run_id: 'r', agent_id: 'a', gateway_id: 'g', seq: 2, event_time: 5,
      body: { 'loopguard.ToolCall': { tool_name: 'ls', args_json: '{}', tool_call_id: null, input_tokens: null, output_tokens: null, cost_usd: null } },
      session_id: null, chain_id: null,
    };
    const bytes = Buffer.concat([MARKER, v3.fingerprint, v3.type.toBuffer(datum)]);
    const event = decodeEvent(bytes);
    assert.equal(event.kind, 'tool_call');
    assert.ok(!('turnId' in event));
  });

  it('keeps 64-bit longs exact', () => {
    const event = { ...base, kind: 'run_started' as const, seq: 2n ** 63n - 1n, eventTime: -(2n ** 63n) };
    assert.deepEqual(decodeEvent(encodeEvent(event)), event);
  });

  it('refuses what Python refuses', () => {
    const call = { ...base, kind: 'tool_call' as const, toolName: 'exec' };
    assert.throws(() => encodeEvent({ ...call, runId: '' }), { name: 'MissingRunIdError' });
    assert.throws(() => encodeEvent({ ...call, toolName: 'a\u0000b' }), { name: 'EncodeError', message: /NUL/ });
    assert.throws(() => encodeEvent({ ...call, toolName: 'ü'.repeat(513) }), { name: 'EncodeError', message: /1026 bytes/ });
    assert.doesNotThrow(() => encodeEvent({ ...call, toolName: 'ü'.repeat(512) }));
    assert.doesNotThrow(() => encodeEvent({ ...call, toolName: 'a\u0000b' }, { checkNames: false }));
    assert.throws(() => encodeEvent({ ...call, seq: 1.5 }), { name: 'EncodeError', message: /seq must be an integer/ });
    assert.throws(() => encodeEvent({ ...call, toolName: 5 as unknown as string }), { name: 'EncodeError', message: /tool_name must be a string, got number 5/ });
    assert.throws(() => encodeEvent({ ...call, argsJson: '"\ud800"' }), { name: 'EncodeError', message: /lone surrogate/ });
    assert.throws(() => encodeEvent({ ...call, argsJson: 'x'.repeat(2_000_000) }), { name: 'PayloadTooLargeError' });
    assert.throws(() => encodeEvent({ ...base, kind: 'nope' } as never), { name: 'EncodeError' });
  });

  it('refuses a datum in non-canonical form and one that is too large', () => {
    const bytes = encodeEvent({ ...base, kind: 'run_started' });
    // seq 1 is the varint 02 at a fixed place; 82 00 is the same number, over-long.
    const at = HEADER_SIZE + 1 + 5 + 1 + 5 + 1 + 2;
    assert.equal(bytes[at], 0x02);
    const overlong = Buffer.concat([bytes.subarray(0, at), Buffer.from([0x82, 0x00]), bytes.subarray(at + 1)]);
    assert.throws(() => decodeEvent(overlong), { name: 'InvalidDatumError' });
    assert.throws(() => decodeEvent(bytes, { maxSize: 10 }), { name: 'PayloadTooLargeError' });
    assert.throws(() => decodeEvent('c301' as unknown as Buffer), { name: 'InvalidDatumError', message: /expected bytes/ });
  });
});

describe('decisions', () => {
  it('round-trips, deriving decision_id and JSON-encoding extra values', () => {
    const bytes = encodeDecision(decision);
    const back = decodeDecision(bytes);
    assert.equal(back.decisionId, 'run-1:4:ping_pong:block');
    assert.deepEqual(back.extra, decision.extra);
    assert.deepEqual(back.extraJson, { blocks: '"1"', n: '2', nested: '{"a":[1.5,null]}' });
    assert.equal(back.argsHash, '');
    assert.equal(back.enforced, true); // left out: enforced, as before shadow mode
    assert.ok(encodeDecision(back).equals(bytes));
  });

  it('carries enforced false for an observe-only decision (mode "observe")', () => {
    const bytes = encodeDecision({ ...decision, enforced: false });
    const back = decodeDecision(bytes);
    assert.equal(back.enforced, false);
    assert.ok(!bytes.equals(encodeDecision(decision)));
    assert.ok(encodeDecision(back).equals(bytes));
    const control = decodeControl(bytes);
    assert.equal(control.type === 'decision' && control.decision.enforced, false);
  });

  it('refuses bad actions, non-JSON extras and unsafe longs', () => {
    assert.throws(() => encodeDecision({ ...decision, action: 'stop' as never }), { name: 'EncodeError', message: /not a known action/ });
    assert.throws(() => encodeDecision({ ...decision, extra: { x: NaN } }), { name: 'EncodeError', message: /not JSON/ });
    assert.throws(() => encodeDecision({ ...decision, runId: '' }), { name: 'MissingRunIdError' });
    assert.throws(() => encodeDecision({ ...decision, extraJson: { x: '{' } }), { name: 'EncodeError' });
  });

  it('is told apart from watermarks on the control topic', () => {
    assert.equal(decodeControl(encodeDecision(decision)).type, 'decision');
    const wm = decodeControl(encodeWatermark({ runId: 'r', gatewayId: 'g', seq: 3, agentId: 'a', eventTime: 5 }));
    assert.equal(wm.type, 'watermark');
    assert.throws(() => decodeControl(encodeEvent({ ...base, kind: 'run_started' })), { name: 'SchemaMismatchError' });
    const unknown = encodeDecision(decision);
    unknown.fill(0, 2, HEADER_SIZE);
    assert.throws(() => decodeControl(unknown), { name: 'UnknownSchemaError' });
    assert.throws(() => decodeControl(Buffer.from('junk')), { name: 'BadMarkerError' });
  });
});

describe('watermarks', () => {
  it('round-trip with schema defaults for the fields left out', () => {
    const fields = (ownSchemas().RunWatermark.type as unknown as { fields: { name: string }[] }).fields.map((f) => f.name);
    const input: Record<string, unknown> = { runId: 'run-1', gatewayId: 'gw', seq: 7 };
    if (fields.includes('agent_id')) input.agentId = 'agent';
    if (fields.includes('event_time')) input.eventTime = 1000;
    const back = decodeWatermark(encodeWatermark(input as never));
    assert.equal(back.runId, 'run-1');
    assert.equal(back.seq, 7);
    if (fields.includes('status')) assert.equal(back.status, 'active');
    assert.throws(() => encodeWatermark({ runId: '', gatewayId: 'g', seq: 1 }), { name: 'MissingRunIdError' });
  });
});

describe('batched watermarks (RunWatermarks, issue 24)', () => {
  const usage = {
    inputTokens: 120_000,
    outputTokens: 3_000,
    costUsd: 1.25,
    toolCalls: 4,
    loopTokens: 61_500,
    loopCostUsd: 0.625,
    loopCalls: 2,
    savedTokens: 1_200_000,
  };
  const zeroUsage = { inputTokens: 0, outputTokens: 0, costUsd: 0, toolCalls: 0, loopTokens: 0, loopCostUsd: 0, loopCalls: 0, savedTokens: 0 };
  const marks = [
    { runId: 'run-a', agentId: 'agent', gatewayId: 'gw', seq: 3, eventTime: 1000, status: 'active', eventCount: 3 },
    { runId: 'run-ü-🦀', agentId: 'agént', gatewayId: 'gw-日本', seq: 2 ** 53 - 1, eventTime: 2000, status: 'aborted', eventCount: 2 ** 40, ...usage },
    { runId: 'run-c', agentId: '', gatewayId: '', seq: 0, eventTime: 0 },
  ];

  it('round-trip several runs in order, with and without usage, defaults for what is left out', () => {
    const bytes = encodeWatermarks(marks);
    const back = decodeWatermarks(bytes);
    assert.deepEqual(back, [
      { ...marks[0], ...zeroUsage },
      marks[1],
      { ...marks[2], status: 'active', eventCount: 0, ...zeroUsage },
    ]);
    assert.ok(encodeWatermarks(back).equals(bytes), 'decoded watermarks re-encode byte for byte');
    assert.ok(bytes.subarray(2, HEADER_SIZE).equals(ownSchemas().RunWatermarks.fingerprint));
  });

  it('shape each watermark as decodeWatermark does', () => {
    const alone = decodeWatermark(encodeWatermark(marks[1]));
    assert.deepEqual(decodeWatermarks(encodeWatermarks([marks[1]])), [alone]);
    assert.deepEqual(Object.keys(decodeWatermarks(encodeWatermarks([marks[0]]))[0]), Object.keys(alone));
  });

  it('hold no watermark at all, or refuse a run without id and records of another schema', () => {
    assert.deepEqual(decodeWatermarks(encodeWatermarks([])), []);
    assert.throws(() => encodeWatermarks([marks[0], { ...marks[2], runId: '' }]), { name: 'MissingRunIdError' });
    assert.throws(() => encodeWatermarks([marks[0], null as never]), { name: 'EncodeError' });
    assert.throws(() => encodeWatermarks([{ ...marks[0], seq: 1.5 }]), { name: 'EncodeError' });
    assert.throws(() => decodeWatermarks(encodeWatermark(marks[0])), { name: 'SchemaMismatchError' });
    assert.throws(() => decodeWatermarks(encodeWatermarks(marks).subarray(0, -2)), { name: 'TruncatedMessageError' });
    assert.throws(() => encodeWatermarks(marks, { maxSize: 64 }), { name: 'PayloadTooLargeError' });
  });

  it('refuse a batch holding a watermark with an empty run id on decode', () => {
    const datum = { watermarks: [{ ...ownSchemas().RunWatermarks.type.fromBuffer(encodeWatermarks([marks[0]]).subarray(HEADER_SIZE)).watermarks[0], run_id: '' }] };
    const body = ownSchemas().RunWatermarks.type.toBuffer(datum);
    const message = Buffer.concat([Buffer.from([0xc3, 0x01]), ownSchemas().RunWatermarks.fingerprint, body]);
    assert.throws(() => decodeWatermarks(message), { name: 'MissingRunIdError' });
  });

  it('decodeControl tells decisions, one run\'s watermark and a batch\'s watermarks apart', () => {
    const kinds = [encodeDecision(decision), encodeWatermark(marks[0]), encodeWatermark(marks[1]), encodeWatermarks(marks)].map(
      (bytes) => decodeControl(bytes),
    );
    assert.deepEqual(kinds.map((k) => k.type), ['decision', 'watermark', 'watermark', 'watermarks']);
    const batch = kinds[3];
    assert.ok(batch.type === 'watermarks');
    assert.deepEqual(batch.watermarks.map((w) => [w.runId, w.seq]), marks.map((m) => [m.runId, m.seq]));
  });
});

describe('schema registry', () => {
  it('reads a decision written with a newer schema through Avro schema resolution', () => {
    const newer = JSON.parse(JSON.stringify(ownSchemas().Decision.type.schema({ exportAttrs: true })));
    newer.fields.splice(3, 0, { name: 'tenant', type: 'string', default: '' });
    const registry = new SchemaRegistry();
    const fingerprint = registry.register(JSON.stringify(newer));
    assert.ok(registry.has(fingerprint));
    const ours = encodeDecision(decision);
    // Write with the newer schema: same datum plus the new field.
    const avsc = registry.get(fingerprint).type;
    const datum = ownSchemas().Decision.type.fromBuffer(ours.subarray(HEADER_SIZE)) as Record<string, unknown>;
    const body = avsc.toBuffer({ ...datum, tenant: 'acme' });
    const message = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint, body]);
    assert.throws(() => decodeDecision(message), { name: 'UnknownSchemaError' });
    const back = decodeDecision(message, { registry });
    assert.equal(back.decisionId, 'run-1:4:ping_pong:block');
    assert.throws(() => decodeEvent(message, { registry }), { name: 'SchemaMismatchError' });
  });

  it('reads a decision from a worker older than enforced as enforced', () => {
    const older = JSON.parse(JSON.stringify(ownSchemas().Decision.type.schema({ exportAttrs: true })));
    older.fields = older.fields.filter((f: { name: string }) => f.name !== 'enforced');
    const registry = new SchemaRegistry();
    const fingerprint = registry.register(JSON.stringify(older));
    const datum = ownSchemas().Decision.type.fromBuffer(
      encodeDecision({ ...decision, enforced: false }).subarray(HEADER_SIZE),
    ) as Record<string, unknown>;
    delete datum.enforced;
    const body = registry.get(fingerprint).type.toBuffer(datum);
    const message = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint, body]);
    const back = decodeDecision(message, { registry });
    assert.equal(back.enforced, true);
    assert.equal(back.decisionId, 'run-1:4:ping_pong:block');
  });
});
