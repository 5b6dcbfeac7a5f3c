/**
 * The plugin's logic, independent of how OpenClaw loads it: one LoopguardGuard per process
 * (OpenClaw may call `register(api)` several times: full, discovery, tool-discovery modes) that
 * owns the loopguard client connection and maps OpenClaw's agent runs to loopguard runs.
 *
 * Id mapping: one loopguard run per OpenClaw agent run. The loopguard run id is OpenClaw's
 * `runId` (a UUID per agent turn, present on tool hooks, agent_end, model calls and agent
 * events). Hooks that carry no runId (compaction, session hooks) are attributed to the run that
 * is active on their `sessionKey` (or `sessionId`). The loopguard agent id is `ctx.agentId`,
 * else the `<agentId>` of an `agent:<agentId>:...` session key, else "main".
 *
 * Failure policy: no hook ever throws. When loopguard cannot answer (not connected, verdict
 * timed out, plugin error) `before_tool_call` allows the call under failMode 'open' and blocks
 * it under 'closed'; the other hooks only log.
 */
import { type FailMode, type LoopguardPluginConfig } from './config.js';
import type {
  AfterCompactionEvent,
  AfterToolCallEvent,
  AgentContext,
  AgentEndEvent,
  AgentEventPayload,
  BeforeToolCallEvent,
  BeforeToolCallResult,
  CompactionContext,
  LlmOutputEvent,
  ModelCallStartedEvent,
  PluginLogger,
  SessionContext,
  SessionEndEvent,
  ToolContext,
  ToolResultMiddlewareContext,
  ToolResultMiddlewareEvent,
  ToolResultMiddlewareResult,
} from './openclaw-types.js';

// -- the loopguard client surface the plugin uses (structurally @loopguard/client) ------------

export interface DecisionLike {
  runId?: string;
  action?: string;
  /** False for an observe-only decision (the agent's config is `mode: "observe"`). */
  enforced?: boolean;
  detector?: string;
  reason: string;
  errorCode?: string;
  toolName?: string;
  count?: number;
  /** Detector details; `model_note` is the decision worded for the model (issue 43). */
  extra?: Record<string, unknown>;
}

/**
 * A decision's note for the model (`extra.model_note`: the agent's loopguard config says
 * `warnings: "model"`; worded by the worker, read as @loopguard/client's `modelNote` reads it);
 * '' when its warnings go to the log only.
 */
export function noteOf(decision: DecisionLike | undefined): string {
  const note = decision?.extra?.model_note;
  return typeof note === 'string' ? note : '';
}

/**
 * A tool result as the tool returned it: `note` (appended by the plugin for the model) taken
 * out of its content, as its own text block or at the end of the last one.
 */
export function withoutNote(result: unknown, note: string): unknown {
  const content = (result as { content?: unknown } | null)?.content;
  if (!Array.isArray(content)) return result;
  const kept = content.filter((block) => !(block && typeof block === 'object' && (block as { text?: unknown }).text === note));
  const last = kept[kept.length - 1] as { type?: unknown; text?: unknown } | undefined;
  if (kept.length === content.length && last && typeof last.text === 'string' && last.text.endsWith(note)) {
    kept[kept.length - 1] = { ...last, text: last.text.slice(0, -note.length) };
  }
  return { ...(result as object), content: kept };
}

/** Notes waiting for their call's tool result at most (a call refused by OpenClaw never has one). */
const PENDING_NOTES_KEPT = 1000;

export interface VerdictLike {
  allowed: boolean;
  warnings: DecisionLike[];
  blockedBy?: DecisionLike;
  reason?: string;
  timedOut: boolean;
  /** The warnings' notes for the model (issue 43; absent when none). */
  modelNote?: string;
}

export interface RunLike {
  readonly runId: string;
  beforeTool(toolName: string, args: unknown, toolCallId?: string | null): Promise<VerdictLike>;
  afterTool(
    toolName: string,
    args: unknown,
    outcome?: { result?: unknown; error?: string | null; toolCallId?: string | null },
  ): Promise<void>;
  compaction(trigger?: string): Promise<void>;
  end(status?: string): Promise<void>;
  /** A model turn's usage, sent with the run's next tool call or its end (issue 28; optional). */
  reportUsage?(usage: TurnUsage): void;
}

/** A model turn's usage as the loopguard client takes it. */
export interface TurnUsage {
  inputTokens?: number | null;
  outputTokens?: number | null;
  costUsd?: number | null;
}

/**
 * The usage of OpenClaw's `llm_output` event: `usage.input` plus the cache reads and writes
 * (tokens the turn read), `usage.output`; the cost where the assistant message carries one
 * (`lastAssistant.usage.cost.total`, as OpenClaw's providers fill it). Undefined when absent.
 */
export function usageOfLlmOutput(event: LlmOutputEvent | undefined): TurnUsage | undefined {
  const usage = event?.usage;
  if (!usage || typeof usage !== 'object') return undefined;
  const n = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0);
  let inputTokens = n(usage.input) + n(usage.cacheRead) + n(usage.cacheWrite);
  const outputTokens = n(usage.output);
  if (!inputTokens && !outputTokens) inputTokens = n(usage.total); // only a total: count it as read
  const last = event?.lastAssistant as { usage?: { cost?: { total?: unknown } } } | undefined;
  const cost = last?.usage?.cost?.total;
  const costUsd = typeof cost === 'number' && Number.isFinite(cost) && cost >= 0 ? cost : null;
  if (!inputTokens && !outputTokens && costUsd === null) return undefined;
  return { inputTokens, outputTokens, costUsd };
}

export interface ClientLike {
  startRun(options: { agentId: string; runId?: string; sessionId?: string | null; trigger?: string | null }): RunLike;
  close(): Promise<void>;
}

export interface ConnectOptions {
  brokers: string[];
  gatewayId: string;
  topicPrefix: string;
  waitBudgetMs: number;
  failMode: FailMode;
  logger: PluginLogger;
  onDecision: (decision: DecisionLike) => void;
  /** Events of one partition a produce request carries at most (0: no limit). */
  maxEventsPerPartition?: number;
}

export interface GuardDeps {
  /** Make a connected client (default: `GatewayClient.connect` of @loopguard/client). */
  connect: (options: ConnectOptions) => Promise<ClientLike>;
  /** Abort OpenClaw's active run of a session (default: the plugin SDK's abortAgentHarnessRun). */
  abortRun: (sessionId: string) => Promise<boolean>;
  logger: PluginLogger;
  now?: () => number;
  /** Optional diagnostics sink: one record per decision the plugin takes (e2e harness, debugging). */
  trace?: (record: Record<string, unknown>) => void;
}

/** Trigger published for a compaction inside a run (see README: OpenClaw retries the turn after it). */
export const IN_RUN_COMPACTION_TRIGGER = 'context_overflow';

const RUN_IDLE_DROP_MS = 6 * 60 * 60 * 1000;

/**
 * OpenClaw reports the end of each *attempt* of a run (agent_end, the embedded runner's
 * lifecycle end/error) and may then retry the same run (after a context-overflow compaction,
 * a timeout compaction, a model fallback). Those ends are applied after this grace period,
 * and any activity of the run in between cancels them. The agent command's own terminal
 * lifecycle event (it carries `startedAt`) is final and applied at once, and gateway_stop
 * applies the pending ends with their own status.
 *
 * It errs long: a run ended too early and then retried would go on as a new loopguard run
 * under the same id, whose events (seq from 1 again) the worker drops as duplicates, so the
 * rest of the run would go unguarded. On a loaded host OpenClaw took more than 3 s between a
 * failed attempt's end and the start of the compaction that precedes its retry.
 */
export const ATTEMPT_END_GRACE_MS = 30_000;

/** Compactions run as derived runs `<runId>:compaction:<id>` on the agent event bus. */
export function baseRunId(runId: string | undefined): string | undefined {
  if (!runId) return runId;
  const i = runId.indexOf(':compaction:');
  return i >= 0 ? runId.slice(0, i) : runId;
}

interface RunEntry {
  key: string;
  agentId: string;
  sessionKey?: string;
  sessionId?: string;
  /** What started the run (the agent hooks' `trigger`: user, heartbeat, cron, ...), once seen. */
  trigger?: string;
  run?: RunLike;
  /** Usage reported before the loopguard run started (handed to it when it does). */
  pendingUsage?: TurnUsage[];
  /** Set once loopguard aborted the run: every further call is refused with this. */
  aborted?: { reason: string; errorCode: string };
  /** Tool calls this plugin refused (their outcome was published by the client already). */
  refused: Set<string>;
  /** A compaction started and has not been published yet. */
  compactionPending: boolean;
  /** The run already waited once for a connection attempt. */
  waitedForConnection: boolean;
  /** An attempt ended: the run ends with this status unless it shows activity first. */
  pendingEnd?: { status: string; timer: NodeJS.Timeout };
  ended: boolean;
  lastSeen: number;
}

function isRunAborted(error: unknown): error is Error & { decision: DecisionLike } {
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { name?: unknown }).name === 'RunAborted' &&
    typeof (error as { decision?: unknown }).decision === 'object'
  );
}

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** Agent id from an `agent:<id>:...` session key. */
export function agentIdFromSessionKey(sessionKey: string | undefined): string | undefined {
  if (!sessionKey) return undefined;
  const parts = sessionKey.split(':');
  return parts[0] === 'agent' && parts[1] ? parts[1] : undefined;
}

/** JSON-safe copy of a tool result (drops what JSON cannot carry; never throws). */
export function jsonSafe(value: unknown): unknown {
  if (value === undefined) return undefined;
  try {
    const seen = new WeakSet<object>();
    const text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === 'bigint') return v.toString();
      if (typeof v === 'object' && v !== null) {
        if (seen.has(v)) return '[circular]';
        seen.add(v);
      }
      return v;
    });
    return text === undefined ? null : JSON.parse(text);
  } catch {
    return String(value);
  }
}

export class LoopguardGuard {
  private client?: ClientLike;
  private connecting?: Promise<ClientLike | undefined>;
  private failedAt = 0;
  private closed = false;
  private warnedNoBrokers = false;
  private readonly runs = new Map<string, RunEntry>();
  /** sessionKey / sessionId -> key of the run active on it. */
  private readonly sessionRuns = new Map<string, string>();
  /** Keys of recently ended runs (insertion order, bounded): activity after the end is reported. */
  private readonly endedKeys = new Set<string>();
  /** toolCallId -> the warnings' note for the model, attached to that call's tool result. */
  private readonly pendingNotes = new Map<string, string>();
  /** toolCallId -> the note attached to its result, taken out again before it is published. */
  private readonly attachedNotes = new Map<string, string>();
  private unsubscribe?: () => void;
  private subscribed = false;
  private readonly now: () => number;
  readonly log: PluginLogger;

  constructor(
    readonly config: LoopguardPluginConfig,
    private readonly deps: GuardDeps,
  ) {
    this.now = deps.now ?? Date.now;
    this.log = deps.logger;
  }

  private trace(record: Record<string, unknown>): void {
    if (!this.deps.trace) return;
    try {
      this.deps.trace({ t: this.now(), ...record });
    } catch {
      // diagnostics must never break a hook
    }
  }

  // -- connection ---------------------------------------------------------------------

  /** Start a connection attempt if none is under way and the last failure is old enough. */
  ensureConnecting(): void {
    if (this.closed || this.client || this.connecting) return;
    if (this.config.brokers.length === 0) {
      if (!this.warnedNoBrokers) {
        this.warnedNoBrokers = true;
        this.log.warn('loopguard: no brokers configured (plugins.entries.loopguard.config.brokers); tool calls are not guarded');
      }
      return;
    }
    if (this.failedAt && this.now() - this.failedAt < this.config.reconnectMs) return;
    const attempt = (async () => {
      try {
        const client = await this.deps.connect({
          brokers: this.config.brokers,
          gatewayId: this.config.gatewayId,
          topicPrefix: this.config.topicPrefix,
          waitBudgetMs: this.config.waitBudgetMs,
          failMode: this.config.failMode,
          logger: this.log,
          onDecision: (d) => this.onDecision(d),
          maxEventsPerPartition: this.config.maxEventsPerPartition,
        });
        if (this.closed) {
          await client.close().catch(() => undefined);
          return undefined;
        }
        this.client = client;
        this.failedAt = 0;
        // runs already under way (seen while connecting) are guarded from now on
        for (const entry of this.runs.values()) this.startLoopguardRun(entry);
        this.trace({ event: 'connected', brokers: this.config.brokers });
        this.log.info?.(`loopguard: connected to ${this.config.brokers.join(',')} as gateway ${this.config.gatewayId}`);
        return client;
      } catch (error) {
        this.failedAt = this.now();
        this.trace({ event: 'connect_failed', error: errorText(error) });
        this.log.warn(
          `loopguard: cannot reach Kafka at ${this.config.brokers.join(',')} (${errorText(error)}); ` +
            `failing ${this.config.failMode}, next attempt in ${this.config.reconnectMs} ms`,
        );
        return undefined;
      } finally {
        this.connecting = undefined;
      }
    })();
    this.connecting = attempt;
  }

  /**
   * The client. A run's first tool call waits (at most connectWaitMs) for a connection attempt
   * that is under way, so a run is guarded from its first call once Kafka is reachable; later
   * calls never wait for a connection, so an unreachable broker costs a run that wait once.
   */
  private async clientFor(entry: RunEntry): Promise<ClientLike | undefined> {
    this.ensureConnecting();
    if (this.client || !this.connecting || entry.waitedForConnection) return this.client;
    entry.waitedForConnection = true;
    const remaining = this.config.connectWaitMs;
    if (remaining <= 0) return this.client;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), remaining);
      timer.unref?.();
    });
    try {
      return (await Promise.race([this.connecting, timeout])) ?? this.client;
    } finally {
      if (timer) clearTimeout(timer);
    }
  }

  private onDecision(decision: DecisionLike): void {
    // every decision for a run of this gateway, as it takes effect (an operator's release
    // included: from this record on, the run's next call is no longer refused)
    this.trace({ event: 'decision', runId: decision.runId, detector: decision.detector, action: decision.action, enforced: decision.enforced !== false });
    // Shadow mode: the client has logged "observe only, loopguard would ..." once and never
    // acts on it; saying "loopguard block" here too would read as if the call was blocked.
    if (decision.enforced === false) return;
    const text = `loopguard ${decision.action ?? 'decision'} (${decision.detector ?? '?'}) on ${decision.toolName ?? '?'}: ${decision.reason}`;
    if (decision.action === 'warn') this.log.info?.(text);
    else this.log.warn(text);
  }

  // -- runs -----------------------------------------------------------------------------

  private keyFor(runId: string | undefined, ctx: { sessionKey?: string; sessionId?: string } | undefined): string | undefined {
    if (runId) return baseRunId(runId);
    if (ctx?.sessionKey && this.sessionRuns.has(ctx.sessionKey)) return this.sessionRuns.get(ctx.sessionKey);
    if (ctx?.sessionId && this.sessionRuns.has(ctx.sessionId)) return this.sessionRuns.get(ctx.sessionId);
    return undefined;
  }

  /** The entry of a run, created on first sight; starts the loopguard run once a client exists. */
  private entryFor(
    key: string,
    ctx: { agentId?: string; sessionKey?: string; sessionId?: string; trigger?: string } | undefined,
  ): RunEntry {
    let entry = this.runs.get(key);
    if (!entry) {
      this.dropIdleRuns();
      if (this.endedKeys.has(key)) {
        // OpenClaw went on with a run whose end was already published (see ATTEMPT_END_GRACE_MS)
        this.trace({ event: 'run_restarted_after_end', runId: key });
        this.log.warn(`loopguard: run ${key} shows activity after its end was published; loopguard may ignore it from here on`);
      }
      entry = {
        key,
        agentId: ctx?.agentId || agentIdFromSessionKey(ctx?.sessionKey) || 'main',
        refused: new Set(),
        compactionPending: false,
        waitedForConnection: false,
        ended: false,
        lastSeen: this.now(),
      };
      this.runs.set(key, entry);
    }
    if (ctx?.sessionKey && !entry.sessionKey) entry.sessionKey = ctx.sessionKey;
    if (ctx?.sessionId && !entry.sessionId) entry.sessionId = ctx.sessionId;
    if (ctx?.trigger && !entry.trigger) entry.trigger = ctx.trigger;
    if (ctx?.agentId && entry.agentId === 'main' && ctx.agentId !== 'main') entry.agentId = ctx.agentId;
    if (!entry.ended) {
      if (entry.sessionKey) this.sessionRuns.set(entry.sessionKey, key);
      if (entry.sessionId) this.sessionRuns.set(entry.sessionId, key);
    }
    entry.lastSeen = this.now();
    this.cancelPendingEnd(entry);
    this.startLoopguardRun(entry);
    return entry;
  }

  private cancelPendingEnd(entry: RunEntry): void {
    if (!entry.pendingEnd) return;
    clearTimeout(entry.pendingEnd.timer);
    this.trace({ event: 'run_resumed', runId: entry.key, cancelledStatus: entry.pendingEnd.status });
    entry.pendingEnd = undefined;
  }

  /** An attempt of the run ended: end the run after the grace period unless it goes on. */
  private scheduleEnd(entry: RunEntry, status: string, source: string): void {
    if (entry.ended) return;
    if (entry.pendingEnd) clearTimeout(entry.pendingEnd.timer);
    const timer = setTimeout(() => {
      if (entry.pendingEnd?.timer !== timer) return;
      entry.pendingEnd = undefined;
      void this.endRun(entry, status, `${source} (after grace)`);
    }, ATTEMPT_END_GRACE_MS);
    timer.unref?.();
    entry.pendingEnd = { status, timer };
  }

  private startLoopguardRun(entry: RunEntry): void {
    if (entry.run || entry.ended || entry.aborted || !this.client) return;
    try {
      // The session key (on every hook's context) names the conversation, so a new run of it
      // (a compaction can start one) keeps its loop counts under loopguard's scope "session";
      // the loopguard client keys the run's events by it.
      const sessionId = entry.sessionKey ?? entry.sessionId ?? null;
      const trigger = entry.trigger ?? null;
      entry.run = this.client.startRun({ agentId: entry.agentId, runId: entry.key, sessionId, trigger });
      for (const usage of entry.pendingUsage?.splice(0) ?? []) entry.run.reportUsage?.(usage);
      this.trace({ event: 'run_started', runId: entry.key, agentId: entry.agentId, sessionKey: entry.sessionKey, trigger });
    } catch (error) {
      this.log.warn(`loopguard: cannot start run ${entry.key}: ${errorText(error)}`);
    }
  }

  private forget(entry: RunEntry): void {
    entry.ended = true;
    this.runs.delete(entry.key);
    this.endedKeys.add(entry.key);
    if (this.endedKeys.size > 1000) this.endedKeys.delete(this.endedKeys.values().next().value as string);
    for (const id of [entry.sessionKey, entry.sessionId]) {
      if (id && this.sessionRuns.get(id) === entry.key) this.sessionRuns.delete(id);
    }
  }

  /** Runs OpenClaw never reported as ended (no agent_end access, crashed turn) are dropped locally. */
  private dropIdleRuns(): void {
    const cutoff = this.now() - RUN_IDLE_DROP_MS;
    for (const entry of [...this.runs.values()]) if (entry.lastSeen < cutoff) this.forget(entry);
  }

  private async endRun(entry: RunEntry, status: string, source = 'unknown'): Promise<void> {
    if (entry.ended) return;
    if (entry.pendingEnd) clearTimeout(entry.pendingEnd.timer);
    entry.pendingEnd = undefined;
    const run = entry.run;
    this.forget(entry);
    this.trace({ event: 'run_ended', runId: entry.key, status, source, published: Boolean(run) });
    if (!run) return;
    try {
      await run.end(status);
    } catch (error) {
      this.log.warn(`loopguard: publishing the end of run ${entry.key} failed: ${errorText(error)}`);
    }
  }

  private async publishPendingCompaction(entry: RunEntry): Promise<void> {
    if (!entry.compactionPending) return;
    entry.compactionPending = false;
    this.trace({ event: 'compaction', runId: entry.key, trigger: IN_RUN_COMPACTION_TRIGGER, published: Boolean(entry.run) });
    if (!entry.run) return;
    await entry.run.compaction(IN_RUN_COMPACTION_TRIGGER);
  }

  private refuse(reason: string): BeforeToolCallResult {
    return { block: true, blockReason: reason };
  }

  private failModeVerdict(why: string): BeforeToolCallResult | undefined {
    if (this.config.failMode === 'closed') return this.refuse(`loopguard unavailable (${why}); failMode is closed`);
    return undefined;
  }

  private async handleAbort(entry: RunEntry, decision: DecisionLike, ctx: ToolContext | undefined): Promise<BeforeToolCallResult> {
    const errorCode = decision.errorCode || decision.detector || 'aborted';
    const reason = noteOf(decision) || `loopguard aborted this run (${errorCode}): ${decision.reason}`;
    const first = !entry.aborted;
    entry.aborted = { reason, errorCode };
    if (first) {
      this.trace({ event: 'aborted', runId: entry.key, errorCode, reason: decision.reason });
      this.log.warn(`loopguard: run ${entry.key} aborted: ${decision.reason}`);
      const run = entry.run;
      entry.run = undefined; // nothing more is published for it but its end
      if (run) {
        this.trace({ event: 'run_end_published', runId: entry.key, status: 'aborted' });
        void run.end('aborted').catch((e) => this.log.warn(`loopguard: ending aborted run failed: ${errorText(e)}`));
      }
      const sessionId = ctx?.sessionId ?? entry.sessionId;
      if (this.config.abortStopsRun && sessionId) {
        try {
          const stopped = await this.deps.abortRun(sessionId);
          this.trace({ event: 'openclaw_abort', runId: entry.key, sessionId, stopped });
          this.log.info?.(`loopguard: asked OpenClaw to abort run ${entry.key} (session ${sessionId}): ${stopped ? 'aborted' : 'no active run'}`);
        } catch (error) {
          this.trace({ event: 'openclaw_abort', runId: entry.key, sessionId, error: errorText(error) });
          this.log.warn(`loopguard: cannot abort OpenClaw run ${entry.key}; blocking its further tool calls instead (${errorText(error)})`);
        }
      }
    }
    return this.refuse(reason);
  }

  // -- hooks ----------------------------------------------------------------------------

  async beforeToolCall(event: BeforeToolCallEvent, ctx: ToolContext | undefined): Promise<BeforeToolCallResult | undefined> {
    try {
      const key = this.keyFor(event?.runId ?? ctx?.runId, ctx) ?? `session:${ctx?.sessionKey ?? ctx?.sessionId ?? 'unknown'}`;
      let entry = this.entryFor(key, ctx);
      if (!this.client && !entry.aborted) {
        await this.clientFor(entry);
        entry = this.entryFor(key, ctx); // starts the loopguard run if the client just connected
      }
      const toolCallId = event.toolCallId ?? ctx?.toolCallId ?? null;
      const base = { event: 'before_tool_call', runId: key, toolName: event.toolName, toolCallId };
      if (entry.aborted) {
        this.trace({ ...base, outcome: 'blocked_after_abort', reason: entry.aborted.reason });
        return this.refuse(entry.aborted.reason);
      }
      if (!entry.run) {
        const why = this.config.brokers.length ? 'not connected to Kafka' : 'no brokers configured';
        const result = this.failModeVerdict(why);
        this.trace({ ...base, outcome: result ? 'refused_fail_closed' : 'allowed_fail_open', reason: why });
        return result;
      }
      await this.publishPendingCompaction(entry);
      let verdict: VerdictLike;
      try {
        verdict = await entry.run.beforeTool(event.toolName, event.params ?? {}, toolCallId);
      } catch (error) {
        if (isRunAborted(error)) {
          const result = await this.handleAbort(entry, error.decision, ctx);
          this.trace({ ...base, outcome: 'aborted', reason: result.blockReason });
          return result;
        }
        throw error;
      }
      const warnings = (verdict.warnings ?? []).map((w) => ({ detector: w.detector, reason: w.reason }));
      for (const warning of verdict.warnings ?? []) {
        this.log.warn(`loopguard warning for run ${key} (${warning.detector ?? '?'}): ${warning.reason}`);
      }
      if (!verdict.allowed) {
        if (toolCallId) entry.refused.add(toolCallId);
        // worded for the model when its agent says so (issue 43): the note is the refusal text
        const note = noteOf(verdict.blockedBy);
        const reason = note
          ? note
          : verdict.blockedBy
            ? `loopguard blocked this call: ${verdict.reason ?? verdict.blockedBy.reason}`
            : `loopguard refused this call: ${verdict.reason ?? 'no verdict'}`;
        this.trace({ ...base, outcome: verdict.blockedBy ? 'blocked' : 'refused_fail_closed', reason, warnings, timedOut: verdict.timedOut });
        return this.refuse(reason);
      }
      const modelNote = verdict.modelNote || (verdict.warnings ?? []).map(noteOf).filter(Boolean).join('\n\n');
      if (modelNote && toolCallId) this.keepNote(toolCallId, modelNote);
      this.trace({
        ...base,
        outcome: verdict.timedOut ? 'allowed_fail_open' : 'allowed',
        warnings,
        timedOut: verdict.timedOut,
        ...(modelNote ? { modelNote } : {}),
      });
      return undefined;
    } catch (error) {
      this.log.error(`loopguard: before_tool_call failed (${errorText(error)}); failing ${this.config.failMode}`);
      const result = this.failModeVerdict('plugin error');
      this.trace({ event: 'before_tool_call', toolName: event?.toolName, outcome: result ? 'refused_fail_closed' : 'allowed_fail_open', reason: errorText(error) });
      return result;
    }
  }

  private keepNote(toolCallId: string, note: string, notes = this.pendingNotes): void {
    notes.set(toolCallId, note);
    for (const oldest of notes.keys()) {
      if (notes.size <= PENDING_NOTES_KEPT) break;
      notes.delete(oldest);
    }
  }

  /**
   * OpenClaw's tool-result middleware (before the result goes back to the model): a call
   * whose verdict carried warnings worded for the model (`warnings: "model"`, issue 43) gets
   * their note appended to its result, as one more text block. Every other result is left as
   * it is. Never throws: a failure leaves the result unchanged.
   */
  toolResultForModel(event: ToolResultMiddlewareEvent, ctx: ToolResultMiddlewareContext | undefined): ToolResultMiddlewareResult | undefined {
    try {
      const toolCallId = event?.toolCallId;
      const note = toolCallId ? this.pendingNotes.get(toolCallId) : undefined;
      if (!toolCallId || note === undefined) return undefined;
      this.pendingNotes.delete(toolCallId);
      this.keepNote(toolCallId, note, this.attachedNotes);
      const result = event.result ?? { content: [] };
      const content = Array.isArray(result.content) ? result.content : [];
      this.trace({ event: 'model_note', runId: baseRunId(ctx?.runId) ?? null, toolName: event.toolName, toolCallId, note });
      return { result: { ...result, content: [...content, { type: 'text', text: note }] } };
    } catch (error) {
      this.log.error(`loopguard: attaching a note to a tool result failed: ${errorText(error)}`);
      return undefined;
    }
  }

  async afterToolCall(event: AfterToolCallEvent, ctx: ToolContext | undefined): Promise<void> {
    try {
      const key = this.keyFor(event?.runId ?? ctx?.runId, ctx);
      if (!key) return;
      const entry = this.runs.get(key);
      if (!entry || entry.ended) return;
      entry.lastSeen = this.now();
      const toolCallId = event.toolCallId ?? ctx?.toolCallId ?? null;
      if (toolCallId && entry.refused.delete(toolCallId)) return; // the client published the refusal
      this.trace({ event: 'after_tool_call', runId: key, toolName: event.toolName, toolCallId, error: event.error ?? null, published: Boolean(entry.run && !entry.aborted) });
      // the tool's own result: a note attached for the model (different each time) would make
      // every outcome of a loop look new to loopguard
      const note = toolCallId ? this.attachedNotes.get(toolCallId) : undefined;
      if (toolCallId) this.attachedNotes.delete(toolCallId);
      if (entry.aborted || !entry.run) return;
      await entry.run.afterTool(event.toolName, event.params ?? {}, {
        result: event.error ? undefined : jsonSafe(note === undefined ? event.result : withoutNote(event.result, note)),
        error: event.error ?? null,
        toolCallId,
      });
    } catch (error) {
      this.log.error(`loopguard: after_tool_call failed: ${errorText(error)}`);
    }
  }

  /** A run's first sign of life (model call, lifecycle start): connect early and start the run. */
  runSeen(runId: string | undefined, ctx: { agentId?: string; sessionKey?: string; sessionId?: string } | undefined): void {
    try {
      this.ensureConnecting();
      const key = baseRunId(runId);
      if (key) this.entryFor(key, ctx);
    } catch (error) {
      this.log.error(`loopguard: tracking run ${runId} failed: ${errorText(error)}`);
    }
  }

  async modelCallStarted(event: ModelCallStartedEvent, ctx: AgentContext | undefined): Promise<void> {
    this.runSeen(event?.runId ?? ctx?.runId, { ...ctx, sessionKey: event?.sessionKey ?? ctx?.sessionKey, sessionId: event?.sessionId ?? ctx?.sessionId });
  }

  /**
   * OpenClaw's `llm_output` (after each model call): its usage goes out with the run's next
   * tool call, or with the run's end for the last turn (issue 28).
   */
  async llmOutput(event: LlmOutputEvent, ctx: AgentContext | undefined): Promise<void> {
    try {
      const usage = usageOfLlmOutput(event);
      const key = this.keyFor(event?.runId ?? ctx?.runId, { ...ctx, sessionId: event?.sessionId ?? ctx?.sessionId });
      if (!usage || !key) return;
      // OpenClaw reports a run's last model call after agent_end at times (an aborted run's
      // especially): nothing is left to carry it, and it must not start the run again.
      if (!this.runs.has(key) && this.endedKeys.has(key)) return;
      const entry = this.entryFor(key, ctx);
      if (entry.ended) return;
      if (entry.run?.reportUsage) entry.run.reportUsage(usage);
      else if (!entry.run) (entry.pendingUsage ??= []).push(usage);
      this.trace({ event: 'usage', runId: key, ...usage });
    } catch (error) {
      this.log.error(`loopguard: llm_output failed: ${errorText(error)}`);
    }
  }

  async agentEnd(event: AgentEndEvent, ctx: AgentContext | undefined): Promise<void> {
    try {
      const key = this.keyFor(event?.runId ?? ctx?.runId, ctx);
      const entry = key ? this.runs.get(key) : undefined;
      if (!entry) return;
      if (entry.aborted) await this.endRun(entry, 'aborted', 'agent_end');
      else this.scheduleEnd(entry, event?.success === false ? 'error' : 'completed', 'agent_end');
    } catch (error) {
      this.log.error(`loopguard: agent_end failed: ${errorText(error)}`);
    }
  }

  async beforeCompaction(_event: unknown, ctx: CompactionContext | undefined): Promise<void> {
    try {
      const key = this.keyFor(ctx?.runId, ctx);
      const entry = key ? this.runs.get(key) : undefined;
      this.trace({ event: 'compaction_hook', hook: 'before_compaction', runId: entry?.key ?? null, sessionKey: ctx?.sessionKey });
      if (!entry || entry.ended || entry.aborted) {
        this.log.debug?.(`loopguard: compaction outside a tracked run (session ${ctx?.sessionKey ?? ctx?.sessionId}); not published`);
        return;
      }
      this.cancelPendingEnd(entry);
      entry.compactionPending = true;
    } catch (error) {
      this.log.error(`loopguard: before_compaction failed: ${errorText(error)}`);
    }
  }

  async afterCompaction(event: AfterCompactionEvent | undefined, ctx: CompactionContext | undefined): Promise<void> {
    try {
      const key = this.keyFor(ctx?.runId, ctx) ?? this.keyFor(undefined, { sessionId: event?.previousSessionId });
      const entry = key ? this.runs.get(key) : undefined;
      this.trace({ event: 'compaction_hook', hook: 'after_compaction', runId: entry?.key ?? null, sessionKey: ctx?.sessionKey });
      if (!entry || entry.ended || entry.aborted) return;
      if (ctx?.sessionId && ctx.sessionId !== entry.sessionId) {
        // the compaction rotated the session generation: follow the run to the new id
        entry.sessionId = ctx.sessionId;
        this.sessionRuns.set(ctx.sessionId, entry.key);
      }
      this.cancelPendingEnd(entry);
      entry.compactionPending = true; // after_compaction alone (no before) still counts
      await this.publishPendingCompaction(entry);
    } catch (error) {
      this.log.error(`loopguard: after_compaction failed: ${errorText(error)}`);
    }
  }

  async sessionStart(_event: unknown, _ctx: SessionContext | undefined): Promise<void> {
    this.ensureConnecting();
  }

  async sessionEnd(event: SessionEndEvent, ctx: SessionContext | undefined): Promise<void> {
    try {
      const key = this.keyFor(undefined, { sessionKey: event?.sessionKey ?? ctx?.sessionKey, sessionId: event?.sessionId ?? ctx?.sessionId });
      const entry = key ? this.runs.get(key) : undefined;
      if (!entry) return;
      await this.endRun(entry, entry.aborted ? 'aborted' : `session_${event?.reason ?? 'end'}`, 'session_end');
    } catch (error) {
      this.log.error(`loopguard: session_end failed: ${errorText(error)}`);
    }
  }

  /** OpenClaw's agent event bus: run lifecycle and compaction phases, with the run id. */
  onAgentEvent(event: AgentEventPayload): void {
    try {
      if (!event || typeof event !== 'object') return;
      const data = (event.data ?? {}) as Record<string, unknown>;
      const ctx = { agentId: event.agentId, sessionKey: event.sessionKey, sessionId: event.sessionId };
      const runId = baseRunId(event.runId);
      if (!runId) return;
      if (event.stream === 'lifecycle') {
        if (runId !== event.runId) return; // a compaction's own lifecycle
        if (data.phase === 'start') this.runSeen(runId, ctx);
        else if (data.phase === 'end' || data.phase === 'error') {
          const entry = this.runs.get(runId);
          if (entry) {
            const status = entry.aborted || data.aborted === true ? 'aborted' : data.phase === 'error' ? 'error' : 'completed';
            // the agent command's terminal event (startedAt + endedAt) is final; an attempt's is not
            if (data.startedAt !== undefined && data.endedAt !== undefined) void this.endRun(entry, status, `lifecycle ${data.phase}`);
            else this.scheduleEnd(entry, status, `lifecycle ${data.phase}`);
          }
        }
      } else if (event.stream === 'compaction') {
        const entry = this.runs.get(runId);
        if (!entry || entry.ended || entry.aborted) return;
        this.cancelPendingEnd(entry);
        if (data.phase === 'start') entry.compactionPending = true;
        else if (data.phase === 'end') {
          if (data.completed === true) {
            entry.compactionPending = true;
            void this.publishPendingCompaction(entry).catch((e) => this.log.error(`loopguard: compaction publish failed: ${errorText(e)}`));
          } else entry.compactionPending = false;
        }
      }
    } catch (error) {
      this.log.error(`loopguard: agent event handling failed: ${errorText(error)}`);
    }
  }

  subscribe(onAgentEvent: ((listener: (event: AgentEventPayload) => void) => () => void) | undefined): void {
    if (this.subscribed || typeof onAgentEvent !== 'function') return;
    try {
      const off = onAgentEvent((event) => this.onAgentEvent(event));
      this.unsubscribe = typeof off === 'function' ? off : undefined;
      this.subscribed = true;
    } catch (error) {
      this.log.warn(`loopguard: cannot subscribe to agent events: ${errorText(error)}`);
    }
  }

  /** Gateway stop / plugin replaced: end the open runs and close the client. */
  async close(status = 'interrupted'): Promise<void> {
    if (this.closed) return;
    try {
      // a run whose attempt ended (its end pending) ended as reported; the others are cut short
      await Promise.all([...this.runs.values()].map((entry) => this.endRun(entry, entry.pendingEnd?.status ?? status, 'close')));
    } catch (error) {
      this.log.warn(`loopguard: ending open runs failed: ${errorText(error)}`);
    }
    this.closed = true;
    try {
      this.unsubscribe?.();
    } catch {
      // ignore
    }
    const client = this.client;
    this.client = undefined;
    if (client) await client.close().catch((e) => this.log.warn(`loopguard: closing the client failed: ${errorText(e)}`));
  }

  /** For tests and diagnostics. */
  snapshot(): { connected: boolean; runs: Array<{ key: string; agentId: string; started: boolean; aborted: boolean }> } {
    return {
      connected: Boolean(this.client),
      runs: [...this.runs.values()].map((e) => ({ key: e.key, agentId: e.agentId, started: Boolean(e.run), aborted: Boolean(e.aborted) })),
    };
  }
}
