/**
 * Avro single-object encoding of events, decisions and run watermarks (one run's, or a batch's
 * RunWatermarks), byte-compatible with the Python codec (`streams.wire.avro`).
 *
 * Every message is `C3 01` + the 8-byte CRC-64-AVRO fingerprint of the writer schema's Parsing
 * Canonical Form (little-endian) + the Avro binary datum. The AgentEvent `body` union branch is
 * chosen by name (`loopguard.ToolCall`, ...), never guessed from the values.
 *
 * Checks follow the Python codec: an empty run id, a NUL or more than 1024 UTF-8 bytes in
 * run/agent/gateway id or tool name, a value of the wrong type or an integer out of range are
 * refused on encode ({@link EncodeError}); on decode a bad marker, a truncated message, an
 * unknown fingerprint, trailing bytes, invalid UTF-8 and the same name rules are refused
 * ({@link CodecError} subclasses). One stricter rule than Python: a datum must be in Avro's
 * canonical binary form (minimal varints), which every Avro writer produces.
 */

import type * as avro from 'avsc';

import {
  BadMarkerError,
  type CodecError,
  EncodeError,
  InvalidDatumError,
  MissingRunIdError,
  PayloadTooLargeError,
  TruncatedMessageError,
  oneLine,
} from './errors';
import { pyJsonDumps } from './pyjson';
import {
  type ParsedSchema,
  type SchemaName,
  type SchemaRegistry,
  defaultRegistry,
  ownSchemas,
  previousSchemas,
} from './schemas';
import {
  ACTIONS,
  type Action,
  type AgentEvent,
  type AgentEventInput,
  type Decision,
  type DecisionInput,
  type EventKind,
  type RunWatermark,
} from './types';

export const MARKER = Buffer.from([0xc3, 0x01]);
export const HEADER_SIZE = MARKER.length + 8;
export const DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024;
/** Names that become keys, SQL columns and decision text: the worker refuses longer ones. */
export const NAME_MAX_BYTES = 1024;

const NAMESPACE = 'loopguard';

export interface EncodeOptions {
  maxSize?: number;
}

export interface EventEncodeOptions extends EncodeOptions {
  /** false writes names the worker would refuse (NUL, over 1024 bytes): for hostile-input tests. */
  checkNames?: boolean;
}

export interface DecodeOptions {
  maxSize?: number;
  /** Where to look up a writer schema that is not ours (default: the process-wide registry). */
  registry?: SchemaRegistry;
}

// ------------------------------------------------------------------------------ framing

function encodeWith(
  name: SchemaName,
  datum: Record<string, unknown>,
  maxSize: number,
  schema: ParsedSchema = ownSchemas()[name],
): Buffer {
  explain(schema, name, datum);
  let body: Buffer;
  try {
    body = schema.type.toBuffer(datum);
  } catch (error) {
    throw new EncodeError(`cannot encode ${name}: ${oneLine(error)}`);
  }
  const size = HEADER_SIZE + body.length;
  if (size > maxSize) throw new PayloadTooLargeError(size, maxSize);
  return Buffer.concat([MARKER, schema.fingerprint, body], size);
}

/** Throw an EncodeError naming the first field the schema rejects (like Python's explain()). */
function explain(schema: ParsedSchema, name: string, datum: Record<string, unknown>): void {
  let first: { path: string[]; value: unknown; type: avro.Type } | undefined;
  const ok = schema.type.isValid(datum, {
    errorHook: (path: string[], value: unknown, type: avro.Type) => {
      first ??= { path, value, type };
    },
  });
  if (!ok && first) {
    const label = [name, ...first.path.filter((p) => !p.startsWith(`${NAMESPACE}.`))].slice(-2).join('.');
    throw new EncodeError(`${label} must be ${describe(first.type)}, got ${describeValue(first.value)}`);
  }
  checkWellFormed(name, datum);
}

const WANTED: Record<string, string> = {
  null: 'null',
  boolean: 'a boolean',
  int: 'an integer in the 32-bit range',
  long: 'an integer in the 64-bit range (a safe integer or a bigint)',
  float: 'a number',
  double: 'a number',
  bytes: 'a Buffer',
  string: 'a string',
};

function describe(type: avro.Type): string {
  const typeName = (type as { typeName?: string }).typeName ?? '';
  const base = typeName.replace(/^(abstract|logical):/, '');
  if (base === 'enum') return `one of ${JSON.stringify((type as unknown as { symbols: string[] }).symbols)}`;
  if (base.startsWith('union')) {
    const branches = (type as unknown as { types: avro.Type[] }).types;
    return branches.map(describe).join(' or ');
  }
  if (base === 'record') return `a ${type.name ?? 'record'}`;
  return WANTED[base] ?? `a ${base}`;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  let text: string;
  try {
    text = typeof value === 'bigint' ? `${value}n` : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return `${typeof value} ${text.length > 60 ? `${text.slice(0, 60)}…` : text}`;
}

/** Lone surrogates cannot be written as UTF-8 (Python refuses them; Buffer would replace them). */
function checkWellFormed(label: string, value: unknown, path = ''): void {
  if (typeof value === 'string') {
    if (!(value as string & { isWellFormed(): boolean }).isWellFormed()) {
      throw new EncodeError(`${label}${path} is not valid Unicode text (lone surrogate)`);
    }
  } else if (value !== null && typeof value === 'object' && !Buffer.isBuffer(value)) {
    for (const [key, item] of Object.entries(value)) {
      checkWellFormed(label, key);
      checkWellFormed(label, item, key.startsWith(`${NAMESPACE}.`) ? path : `${path}.${key}`);
    }
  }
}

function decodeWith(
  name: SchemaName,
  data: unknown,
  options: DecodeOptions,
  maxDefault = DEFAULT_MAX_MESSAGE_SIZE,
): Record<string, unknown> {
  if (!(data instanceof Uint8Array)) {
    throw new InvalidDatumError(`expected bytes, got ${data === null ? 'null' : typeof data}`);
  }
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const maxSize = options.maxSize ?? maxDefault;
  const size = buf.length;
  if (size > maxSize) throw new PayloadTooLargeError(size, maxSize);
  const head = buf.subarray(0, 2);
  if (!head.equals(MARKER.subarray(0, head.length))) {
    throw new BadMarkerError(
      `bad marker ${head.toString('hex')}: not an Avro single-object message (expected c301)`,
    );
  }
  if (size < HEADER_SIZE) {
    throw new TruncatedMessageError(`message is ${size} bytes, shorter than the 10-byte header`);
  }
  const own = ownSchemas()[name];
  const fingerprint = buf.subarray(2, HEADER_SIZE);
  if (fingerprint.equals(own.fingerprint)) return readDatum(name, own, buf);
  const { writer, resolver } = (options.registry ?? defaultRegistry()).resolverFor(fingerprint, own);
  readDatum(name, writer, buf); // validates the bytes against the writer schema
  try {
    return own.type.decode(buf, HEADER_SIZE, resolver).value as Record<string, unknown>;
  } catch (error) {
    throw new InvalidDatumError(`invalid ${name} datum: ${oneLine(error)}`);
  }
}

function readDatum(name: string, schema: ParsedSchema, buf: Buffer): Record<string, unknown> {
  let value: unknown;
  let offset: number;
  try {
    ({ value, offset } = schema.type.decode(buf, HEADER_SIZE));
  } catch (error) {
    // avsc names what it could not read: an enum symbol or union branch index out of range.
    throw new InvalidDatumError(`invalid ${name} datum: ${oneLine(error)}`);
  }
  if (offset < 0) throw new TruncatedMessageError(`${name} message ends inside the datum`);
  if (offset !== buf.length) {
    throw new InvalidDatumError(`${buf.length - offset} trailing bytes after the ${name} datum`);
  }
  // avsc reads invalid UTF-8 as U+FFFD and accepts over-long varints: the datum must encode
  // back to exactly the bytes it was read from.
  let again: Buffer | undefined;
  try {
    again = schema.type.toBuffer(value);
  } catch {
    again = undefined;
  }
  if (!again || !again.equals(buf.subarray(HEADER_SIZE))) {
    throw new InvalidDatumError(
      `invalid ${name} datum: not valid UTF-8 text, an int out of range, or not in canonical Avro form`,
    );
  }
  return value as Record<string, unknown>;
}

// ------------------------------------------------------------------------------ names

const NAME_FIELDS = ['run_id', 'agent_id', 'gateway_id', 'tool_name', 'session_id', 'chain_id', 'turn_id'] as const;

function storableNamesProblem(record: string, ...sources: Record<string, unknown>[]): string | undefined {
  for (const values of sources) {
    for (const field of NAME_FIELDS) {
      const value = values[field];
      if (typeof value !== 'string') continue;
      if (value.includes('\u0000')) return `${record}.${field} contains a NUL character`;
      if (value.length * 3 <= NAME_MAX_BYTES) continue; // at most 3 UTF-8 bytes a UTF-16 unit
      const size = Buffer.byteLength(value, 'utf8');
      if (size > NAME_MAX_BYTES) {
        return `${record}.${field} is ${size} bytes long, over the ${NAME_MAX_BYTES}-byte limit`;
      }
    }
  }
  return undefined;
}

// ------------------------------------------------------------------------------ events

/** A model turn's usage (issue 28), on the events that carry a turn. */
const USAGE_FIELDS: [camel: string, wire: string, fallback: unknown][] = [
  ['inputTokens', 'input_tokens', null],
  ['outputTokens', 'output_tokens', null],
  ['costUsd', 'cost_usd', null],
];

const BODY: Record<EventKind, { record: string; fields: [camel: string, wire: string, fallback: unknown][] }> = {
  tool_call: {
    record: 'ToolCall',
    fields: [
      ['toolName', 'tool_name', undefined],
      ['argsJson', 'args_json', '{}'],
      ['toolCallId', 'tool_call_id', null],
      ...USAGE_FIELDS,
      ['turnId', 'turn_id', null],
    ],
  },
  tool_result: {
    record: 'ToolResult',
    fields: [
      ['toolName', 'tool_name', undefined],
      ['argsJson', 'args_json', null],
      ['resultJson', 'result_json', null],
      ['error', 'error', null],
      ['toolCallId', 'tool_call_id', null],
    ],
  },
  compaction_retry: { record: 'CompactionRetry', fields: [['trigger', 'trigger', 'context_overflow']] },
  run_started: { record: 'RunStarted', fields: [['trigger', 'trigger', null]] },
  run_ended: { record: 'RunEnded', fields: [['status', 'status', 'completed'], ...USAGE_FIELDS] },
};
// Optional fields added later (issue 17): left out of a decoded event while unset, as Python's
// event_to_dict leaves them out, so events from older gateways look as they always did.
const OMITTED_WHEN_NULL = new Set(['trigger', 'inputTokens', 'outputTokens', 'costUsd', 'turnId']);
const KIND_BY_BRANCH = new Map<string, EventKind>(
  Object.entries(BODY).map(([kind, spec]) => [`${NAMESPACE}.${spec.record}`, kind as EventKind]),
);

/** Single-object Avro bytes for an event; throws {@link CodecError} subclasses. */
export function encodeEvent(event: AgentEventInput, options: EventEncodeOptions = {}): Buffer {
  const spec = event && BODY[(event as { kind: EventKind }).kind];
  if (!spec) throw new EncodeError(`not an AgentEvent: kind ${describeValue((event as { kind?: unknown })?.kind)}`);
  const record = spec.record;
  if (!event.runId) throw new MissingRunIdError(record);
  const source = event as unknown as Record<string, unknown>;
  const body: Record<string, unknown> = {};
  for (const [camel, wire, fallback] of spec.fields) {
    const value = source[camel];
    body[wire] = value === undefined ? fallback : value;
  }
  for (const [, wire] of USAGE_FIELDS) {
    const value = body[wire];
    if (typeof value === 'number' && (!Number.isFinite(value) || value < 0)) {
      throw new EncodeError(`${record}.${wire} must be a finite number, 0 or more, got ${value}`);
    }
  }
  const ids = { run_id: event.runId, agent_id: event.agentId, gateway_id: event.gatewayId };
  const session = { session_id: event.sessionId ?? null, chain_id: event.chainId ?? null };
  if (options.checkNames ?? true) {
    const problem = storableNamesProblem(record, ids, body, session);
    if (problem) throw new EncodeError(problem);
  }
  const datum = {
    ...ids,
    seq: event.seq,
    event_time: event.eventTime,
    body: { [`${NAMESPACE}.${record}`]: body },
    ...session,
  };
  return encodeWith('AgentEvent', datum, options.maxSize ?? DEFAULT_MAX_MESSAGE_SIZE);
}

/** Decode an event written with any registered AgentEvent schema version. */
export function decodeEvent(data: Uint8Array, options: DecodeOptions = {}): AgentEvent {
  const datum = decodeWith('AgentEvent', data, options);
  const body = datum.body as Record<string, Record<string, unknown>> | null;
  const branch = body && typeof body === 'object' ? Object.keys(body)[0] : undefined;
  const kind = branch === undefined ? undefined : KIND_BY_BRANCH.get(branch);
  if (!kind || !body || !branch) throw new InvalidDatumError('AgentEvent body is not a known event kind');
  const spec = BODY[kind];
  if (!datum.run_id) throw new MissingRunIdError(spec.record);
  const values = body[branch];
  const problem = storableNamesProblem(spec.record, datum, values);
  if (problem) throw new InvalidDatumError(problem);
  const event: Record<string, unknown> = {
    kind,
    runId: datum.run_id,
    agentId: datum.agent_id,
    gatewayId: datum.gateway_id,
    seq: datum.seq,
    eventTime: datum.event_time,
  };
  // null (or absent: an older writer) is no session
  if (datum.session_id !== null && datum.session_id !== undefined) event.sessionId = datum.session_id;
  if (datum.chain_id !== null && datum.chain_id !== undefined) event.chainId = datum.chain_id;
  for (const [camel, wire] of spec.fields) {
    if (values[wire] === null && OMITTED_WHEN_NULL.has(camel)) continue;
    event[camel] = values[wire];
  }
  return event as unknown as AgentEvent;
}

// ------------------------------------------------------------------------------ decisions

const DECISION_FIELDS: [camel: keyof Decision, wire: string, fallback: unknown][] = [
  ['runId', 'run_id', undefined],
  ['agentId', 'agent_id', undefined],
  ['gatewayId', 'gateway_id', undefined],
  ['seq', 'seq', undefined],
  ['eventTime', 'event_time', undefined],
  ['action', 'action', undefined],
  ['detector', 'detector', undefined],
  ['severity', 'severity', undefined],
  ['count', 'count', undefined],
  ['toolName', 'tool_name', undefined],
  ['reason', 'reason', undefined],
  ['argsHash', 'args_hash', ''],
  ['resultHash', 'result_hash', ''],
  ['pairedToolName', 'paired_tool_name', ''],
  ['errorCode', 'error_code', ''],
  ['configVersion', 'config_version', ''],
  ['enforced', 'enforced', true],
];

/** `run_id:seq:detector:action`, the identity a gateway deduplicates decisions by. */
export function decisionIdOf(d: Pick<Decision, 'runId' | 'seq' | 'detector' | 'action'>): string {
  return `${d.runId}:${d.seq}:${d.detector}:${d.action}`;
}

function encodeExtra(extra: unknown, extraJson: unknown): Record<string, string> {
  if (extraJson !== undefined && extraJson !== null) {
    if (typeof extraJson !== 'object' || Array.isArray(extraJson)) {
      throw new EncodeError('Decision.extraJson must be an object of JSON texts');
    }
    const out: Record<string, string> = {};
    for (const [key, text] of Object.entries(extraJson)) {
      if (typeof text !== 'string') throw new EncodeError(`Decision.extraJson[${JSON.stringify(key)}] must be a string`);
      try {
        JSON.parse(text);
      } catch (error) {
        throw new EncodeError(`Decision.extraJson[${JSON.stringify(key)}] is not JSON: ${oneLine(error)}`);
      }
      out[key] = text;
    }
    return out;
  }
  if (extra === undefined) return {};
  if (extra === null || typeof extra !== 'object' || Array.isArray(extra) || extra instanceof Map) {
    throw new EncodeError(`Decision.extra must be a plain object, got ${describeValue(extra)}`);
  }
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(extra)) {
    try {
      // Python: json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
      out[key] = pyJsonDumps(value, { compact: true, allowNan: false });
    } catch (error) {
      throw new EncodeError(`Decision.extra[${JSON.stringify(key)}] is not JSON: ${oneLine(error)}`);
    }
  }
  return out;
}

/** Single-object Avro bytes for a Decision (control topic). */
export function encodeDecision(decision: DecisionInput, options: EncodeOptions = {}): Buffer {
  if (!decision || typeof decision !== 'object') throw new EncodeError(`not a Decision: ${describeValue(decision)}`);
  if (!decision.runId) throw new MissingRunIdError('Decision');
  if (!ACTIONS.includes(decision.action)) {
    throw new EncodeError(`Decision.action ${describeValue(decision.action)} is not a known action`);
  }
  const source = decision as unknown as Record<string, unknown>;
  const datum: Record<string, unknown> = {};
  for (const [camel, wire, fallback] of DECISION_FIELDS) {
    const value = source[camel];
    datum[wire] = value === undefined ? fallback : value;
  }
  datum.extra = encodeExtra(decision.extra, decision.extraJson);
  datum.decision_id = decisionIdOf(decision);
  return encodeWith('Decision', datum, options.maxSize ?? DEFAULT_MAX_MESSAGE_SIZE);
}

function safeNumber(record: string, field: string, value: unknown): number {
  if (typeof value !== 'number') {
    throw new InvalidDatumError(`${record}.${field} ${String(value)} is outside the safe integer range`);
  }
  return value;
}

/** Decode a Decision; `decisionId` is derived (as in Python), not taken from the wire. */
export function decodeDecision(data: Uint8Array, options: DecodeOptions = {}): Decision {
  const datum = decodeWith('Decision', data, options);
  if (!datum.run_id) throw new MissingRunIdError('Decision');
  const extraJson = datum.extra as Record<string, string>;
  const extra: Record<string, unknown> = {};
  for (const [key, text] of Object.entries(extraJson)) {
    try {
      extra[key] = JSON.parse(text);
    } catch (error) {
      throw new InvalidDatumError(`Decision.extra holds invalid JSON: ${oneLine(error)}`);
    }
  }
  const out: Record<string, unknown> = {};
  for (const [camel, wire] of DECISION_FIELDS) out[camel] = datum[wire];
  for (const field of ['seq', 'eventTime', 'count'] as const) out[field] = safeNumber('Decision', field, out[field]);
  const decision = out as unknown as Decision;
  decision.action = datum.action as Action;
  decision.extra = extra;
  decision.decisionId = decisionIdOf(decision);
  decision.extraJson = { ...extraJson };
  return decision;
}

// ------------------------------------------------------------------------------ watermarks

/** schemas/previous/RunWatermark.v3.avsc: the version before the usage fields. */
const PREVIOUS_WATERMARK = 'RunWatermark.v3';

const camelCase = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

interface AvroField {
  name: string;
  defaultValue(): unknown;
}

function recordFields(schema: ParsedSchema): AvroField[] {
  return (schema.type as unknown as { fields: AvroField[] }).fields;
}

/**
 * Single-object Avro bytes for a RunWatermark (control topic, key = run id). Every field of the
 * schema is taken from its camelCase name (`run_id` from `runId`, ...); a field left out gets the
 * schema's default, and one without a default is an {@link EncodeError}.
 */
export function encodeWatermark(watermark: RunWatermark, options: EncodeOptions = {}): Buffer {
  if (!watermark || typeof watermark !== 'object') throw new EncodeError(`not a RunWatermark: ${describeValue(watermark)}`);
  if (!watermark.runId) throw new MissingRunIdError('RunWatermark');
  const source = watermark as unknown as Record<string, unknown>;
  // A run without usage goes out in the version before the usage fields (as Python writes it),
  // which gateways from before issue 28 read.
  const usage = watermark.inputTokens || watermark.outputTokens || watermark.costUsd || watermark.savedTokens;
  const schema = usage ? ownSchemas().RunWatermark : previousSchemas()[PREVIOUS_WATERMARK];
  const datum: Record<string, unknown> = {};
  for (const field of recordFields(schema)) {
    const value = source[camelCase(field.name)];
    datum[field.name] = value === undefined ? field.defaultValue() : value;
  }
  return encodeWith('RunWatermark', datum, options.maxSize ?? DEFAULT_MAX_MESSAGE_SIZE, schema);
}

/** Decode a RunWatermark: every field of the schema, camelCase; longs must be safe integers. */
export function decodeWatermark(data: Uint8Array, options: DecodeOptions = {}): RunWatermark {
  const datum = decodeWith('RunWatermark', data, options);
  return watermarkFromDatum(datum, recordFields(ownSchemas().RunWatermark));
}

/** One RunWatermark datum (alone or in a batch) as camelCase values, longs as safe integers. */
function watermarkFromDatum(datum: Record<string, unknown>, fields: AvroField[]): RunWatermark {
  if (!datum.run_id) throw new MissingRunIdError('RunWatermark');
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const camel = camelCase(field.name);
    const value = datum[field.name];
    out[camel] = typeof value === 'bigint' ? safeNumber('RunWatermark', camel, value) : value;
  }
  if (typeof out.seq !== 'number') throw new InvalidDatumError('RunWatermark has no seq');
  return out as unknown as RunWatermark;
}

// ------------------------------------------------------------------------ batched watermarks

/** The fields of the RunWatermark record defined inline in RunWatermarks (the same as RunWatermark's). */
function batchedWatermarkFields(): AvroField[] {
  const array = (ownSchemas().RunWatermarks.type as unknown as { fields: { type: avro.Type }[] }).fields[0].type;
  return (array as unknown as { itemsType: { fields: AvroField[] } }).itemsType.fields;
}

/**
 * Single-object Avro bytes for a RunWatermarks record (issue 24): what a worker publishes once
 * per control partition and batch instead of one RunWatermark per run (no key). Each watermark
 * is mapped as {@link encodeWatermark} maps one; the client only reads these, this is for tests
 * and the cross-language vectors.
 */
export function encodeWatermarks(watermarks: readonly RunWatermark[], options: EncodeOptions = {}): Buffer {
  if (!Array.isArray(watermarks)) throw new EncodeError(`not a list of RunWatermark: ${describeValue(watermarks)}`);
  const fields = batchedWatermarkFields();
  const items = watermarks.map((watermark) => {
    if (!watermark || typeof watermark !== 'object') throw new EncodeError(`not a RunWatermark: ${describeValue(watermark)}`);
    if (!watermark.runId) throw new MissingRunIdError('RunWatermark');
    const source = watermark as unknown as Record<string, unknown>;
    const datum: Record<string, unknown> = {};
    for (const field of fields) {
      const value = source[camelCase(field.name)];
      datum[field.name] = value === undefined ? field.defaultValue() : value;
    }
    return datum;
  });
  return encodeWith('RunWatermarks', { watermarks: items }, options.maxSize ?? DEFAULT_MAX_MESSAGE_SIZE);
}

/** Decode a RunWatermarks record: its watermarks in order, each shaped as {@link decodeWatermark}'s. */
export function decodeWatermarks(data: Uint8Array, options: DecodeOptions = {}): RunWatermark[] {
  const datum = decodeWith('RunWatermarks', data, options);
  const fields = batchedWatermarkFields();
  return (datum.watermarks as Record<string, unknown>[]).map((item) => watermarkFromDatum(item, fields));
}

// ------------------------------------------------------------------------------ control

export type ControlMessage =
  | { type: 'decision'; decision: Decision }
  | { type: 'watermark'; watermark: RunWatermark }
  | { type: 'watermarks'; watermarks: RunWatermark[] };

/**
 * Decode a control-topic message: a Decision, a RunWatermark or a batch's RunWatermarks, told
 * apart by the writer schema's fingerprint (ours, or one registered under the same record name).
 * Workers write RunWatermarks unless LOOPGUARD_WATERMARKS=per_run; both kinds are read.
 */
export function decodeControl(data: Uint8Array, options: DecodeOptions = {}): ControlMessage {
  if (!(data instanceof Uint8Array)) {
    throw new InvalidDatumError(`expected bytes, got ${data === null ? 'null' : typeof data}`);
  }
  if (data.length >= HEADER_SIZE && data[0] === MARKER[0] && data[1] === MARKER[1]) {
    const fullname = controlRecordName(Buffer.from(data.subarray(2, HEADER_SIZE)), options);
    const own = ownSchemas();
    if (fullname === own.RunWatermark.fullname) return { type: 'watermark', watermark: decodeWatermark(data, options) };
    if (fullname === own.RunWatermarks.fullname) {
      return { type: 'watermarks', watermarks: decodeWatermarks(data, options) };
    }
  }
  return { type: 'decision', decision: decodeDecision(data, options) };
}

/** The record name a control message was written with; ours without a registry look-up. */
function controlRecordName(fingerprint: Buffer, options: DecodeOptions): string {
  const own = ownSchemas();
  for (const schema of [own.RunWatermarks, own.RunWatermark, own.Decision]) {
    if (fingerprint.equals(schema.fingerprint)) return schema.fullname;
  }
  return (options.registry ?? defaultRegistry()).get(fingerprint).fullname; // or UnknownSchemaError
}
