/**
 * Events, decisions and watermarks: the Avro records in `schemas/` (and Python's
 * `streams.events`) with camelCase field names. The wire names are the snake_case ones.
 */

/** An Avro long: a JS number while it is a safe integer, a bigint beyond (events only). */
export type Long = number | bigint;

/** Fields every event carries (Python's `Envelope`). */
export interface EventEnvelope {
  runId: string;
  agentId: string;
  gatewayId: string;
  /** Position of the event in its run, assigned by the gateway (1, 2, ...). */
  seq: Long;
  /** Epoch milliseconds, set by the gateway. */
  eventTime: Long;
  /**
   * The conversation the run belongs to (issue 17); events are keyed by it when set, and
   * `scope: "session"` carries a loop's counts over to the session's next run. Left out
   * (or null) when the run has no session.
   */
  sessionId?: string | null;
  /**
   * A chain of agent-to-agent messages this run belongs to (issue 28), propagated by the
   * gateway: the worker judges loops between agents per chain. Left out when unknown.
   */
  chainId?: string | null;
}

/** The agent asked for a tool; emitted before the tool runs. */
export interface ToolCallEvent extends EventEnvelope, TurnUsage {
  kind: 'tool_call';
  toolName: string;
  argsJson: string;
  toolCallId: string | null;
  /**
   * The assistant turn (message) that asked for the call (issue 44): the parallel calls of one
   * turn share it, and the worker judges them as a set. Left out (or null) when unknown.
   */
  turnId?: string | null;
}

/**
 * What the model turn behind an event cost (issue 28): set on the first tool call of a turn
 * and on `run_ended` (the run's last turn), left out (or null) where the gateway does not know.
 */
export interface TurnUsage {
  /** Tokens the turn read (prompt, cache reads and writes included). */
  inputTokens?: number | null;
  /** Tokens the turn wrote. */
  outputTokens?: number | null;
  /** What the turn cost in US dollars. */
  costUsd?: number | null;
}

/** A tool finished (or was refused); `error` set means it failed. */
export interface ToolResultEvent extends EventEnvelope {
  kind: 'tool_result';
  toolName: string;
  argsJson: string | null;
  resultJson: string | null;
  error: string | null;
  toolCallId: string | null;
}

/** The runner compacted the context and retried; `trigger` says why. */
export interface CompactionRetryEvent extends EventEnvelope {
  kind: 'compaction_retry';
  trigger: string;
}

/** A run began; `trigger` says what started it ("user", "heartbeat", "cron", "compaction"). */
export interface RunStartedEvent extends EventEnvelope {
  kind: 'run_started';
  /** Left out (or null) when the gateway does not know. */
  trigger?: string | null;
}

export interface RunEndedEvent extends EventEnvelope, TurnUsage {
  kind: 'run_ended';
  status: string;
}

export type AgentEvent =
  | ToolCallEvent
  | ToolResultEvent
  | CompactionRetryEvent
  | RunStartedEvent
  | RunEndedEvent;

export type EventKind = AgentEvent['kind'];

type Optional<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

/** What {@link encodeEvent} accepts: body fields with a schema default may be left out. */
export type AgentEventInput =
  | Optional<ToolCallEvent, 'argsJson' | 'toolCallId'>
  | Optional<ToolResultEvent, 'argsJson' | 'resultJson' | 'error' | 'toolCallId'>
  | Optional<CompactionRetryEvent, 'trigger'>
  | RunStartedEvent
  | Optional<RunEndedEvent, 'status'>;

/** What the gateway must do; ordered by severity. */
export type Action = 'warn' | 'block' | 'abort';
export const ACTIONS: readonly Action[] = ['warn', 'block', 'abort'];

/** One loop detection and what the gateway must do about it (control topic). */
export interface Decision {
  runId: string;
  agentId: string;
  gatewayId: string;
  /** Sequence number of the event that triggered the decision. */
  seq: number;
  eventTime: number;
  action: Action;
  detector: string;
  /** "warning" | "critical" */
  severity: string;
  count: number;
  toolName: string;
  reason: string;
  argsHash: string;
  resultHash: string;
  pairedToolName: string;
  errorCode: string;
  configVersion: string;
  /**
   * False when the agent's config is `mode: "observe"` (shadow mode): log the decision, never
   * act on it. Decisions from workers older than the field decode as true.
   */
  enforced: boolean;
  /** Detector-specific details (each value travels as JSON text). */
  extra: Record<string, unknown>;
  /** `runId:seq:detector:action`, derived (as in Python), unique per decision. */
  decisionId: string;
  /**
   * The extra values as the JSON texts on the wire (set by {@link decodeDecision}). When
   * present, {@link encodeDecision} writes these texts instead of re-serialising `extra`, so a
   * decoded decision re-encodes byte for byte (JS numbers cannot tell `1.0` from `1`).
   */
  extraJson?: Record<string, string>;
}

/** What {@link encodeDecision} accepts: the optional fields default to "" / {} / true. */
export type DecisionInput = Optional<
  Decision,
  'argsHash' | 'resultHash' | 'pairedToolName' | 'errorCode' | 'configVersion' | 'enforced' | 'extra' | 'decisionId'
>;

/**
 * The worker processed a run's events up to and including `seq` (control topic, key = run id;
 * or, since issue 24, one of the watermarks of a batch's RunWatermarks record, which has no key).
 * The record is new and growing: the codec maps every field of the schema it was built with
 * (camelCase), so the optional ones below appear when the schema has them.
 */
export interface RunWatermark {
  runId: string;
  gatewayId: string;
  /** Highest seq of the run the worker has processed. */
  seq: number;
  agentId?: string;
  /** event_time of the event at seq (epoch ms). */
  eventTime?: number;
  /** The run's state after seq: active | ended | aborted. */
  status?: string;
  /** Events of the run the worker has applied so far. */
  eventCount?: number;
  /** The run's usage so far (issue 28; 0 when its gateway reports none). */
  inputTokens?: number;
  outputTokens?: number;
  costUsd?: number;
  toolCalls?: number;
  /** From its first loop decision on. */
  loopTokens?: number;
  loopCostUsd?: number;
  loopCalls?: number;
  /** Estimate of the tokens loopguard's block or abort saved. */
  savedTokens?: number;
}
