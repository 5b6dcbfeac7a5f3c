/**
 * Hold instead of fail (issue 43), as the Python client's `streams/gateway/hold.py`: a block
 * whose decision says `extra.on_block === "hold"` (the agent's `onBlock: "hold"`) is held, up
 * to `extra.hold_timeout_seconds`, for an operator's release (the call goes through) or abort
 * (RunAborted) of the run on the control topic; with no answer in time the gateway publishes
 * the agent's `hold_default` ("abort" or "release") as an operator command of its own
 * (source "hold"), so the audit trail and replay see it; "refuse" refuses the call as before.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

import { HEADER_SIZE, MARKER } from './codec';
import { InvalidDatumError } from './errors';
import { type ParsedSchema, parseSchemaText, schemaDir } from './schemas';
import type { Decision } from './types';

export const RELEASE_DETECTOR = 'operator_release';
export const ABORT_DETECTOR = 'operator_abort';
/** How long a published hold default waits for the worker's answer. */
export const DEFAULT_ANSWER_WAIT_MS = 10_000;
/** Calls a hold default "release" covers (Python's DEFAULT_RELEASE_CALLS). */
export const DEFAULT_RELEASE_CALLS = 10;

export type HoldDefault = 'refuse' | 'abort' | 'release';

export interface HoldSettings {
  timeoutMs: number;
  holdDefault: HoldDefault;
}

/** The hold a block asks for; undefined: refuse it at once, as every block before issue 43. */
export function holdSettings(block: Decision | undefined): HoldSettings | undefined {
  if (!block || block.extra?.on_block !== 'hold') return undefined;
  const seconds = block.extra?.hold_timeout_seconds;
  const chosen = block.extra?.hold_default;
  return {
    timeoutMs: typeof seconds === 'number' && seconds > 0 ? seconds * 1000 : 300_000,
    holdDefault: chosen === 'abort' || chosen === 'release' ? chosen : 'refuse',
  };
}

/** The first enforced release or abort of the run among `decisions.slice(since)`. */
export function operatorAnswer(decisions: readonly Decision[], since: number): Decision | undefined {
  return decisions
    .slice(since)
    .find((d) => (d.detector === RELEASE_DETECTOR || d.detector === ABORT_DETECTOR) && d.enforced !== false);
}

export interface OperatorCommandInput {
  runId: string;
  agentId: string;
  sessionId?: string | null;
  eventTime: number;
  command: 'release' | 'abort';
  releaseId: string;
  calls?: number | null;
  until?: number | null;
  reason: string;
  releasedBy: string;
  scope?: string;
  source?: string;
}

let commandSchema: ParsedSchema | undefined;

/** `schemas/internal/OperatorCommand.avsc`, copied into this package at build time. */
export function operatorCommandSchema(): ParsedSchema {
  if (!commandSchema) {
    const file = path.join(schemaDir(), 'internal', 'OperatorCommand.avsc');
    commandSchema = parseSchemaText(fs.readFileSync(file, 'utf8'));
  }
  return commandSchema;
}

/** An operator command as the events topic carries it (its own schema's fingerprint). */
export function encodeOperatorCommand(command: OperatorCommandInput): Buffer {
  const schema = operatorCommandSchema();
  const body = schema.type.toBuffer({
    run_id: command.runId,
    agent_id: command.agentId,
    session_id: command.sessionId ?? null,
    event_time: command.eventTime,
    command: command.command,
    release_id: command.releaseId,
    calls: command.calls ?? null,
    until: command.until ?? null,
    reason: command.reason,
    released_by: command.releasedBy,
    scope: command.scope ?? 'run',
    source: command.source ?? 'hold',
  });
  return Buffer.concat([MARKER, schema.fingerprint, body]);
}

/** Inverse of {@link encodeOperatorCommand} (tools, tests). */
export function decodeOperatorCommand(data: Buffer): OperatorCommandInput {
  const schema = operatorCommandSchema();
  if (data.length < HEADER_SIZE || !data.subarray(2, HEADER_SIZE).equals(schema.fingerprint)) {
    throw new InvalidDatumError('not an OperatorCommand (another schema fingerprint)');
  }
  const datum = schema.type.fromBuffer(data.subarray(HEADER_SIZE)) as Record<string, unknown>;
  return {
    runId: datum.run_id as string,
    agentId: datum.agent_id as string,
    sessionId: (datum.session_id as string | null) ?? null,
    eventTime: Number(datum.event_time),
    command: datum.command as 'release' | 'abort',
    releaseId: datum.release_id as string,
    calls: datum.calls === null ? null : Number(datum.calls),
    until: datum.until === null ? null : Number(datum.until),
    reason: datum.reason as string,
    releasedBy: datum.released_by as string,
    scope: datum.scope as string,
    source: datum.source as string,
  };
}
