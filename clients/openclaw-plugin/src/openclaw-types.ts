/**
 * The slice of OpenClaw's plugin API this plugin uses, declared locally so the plugin builds
 * without the (large) openclaw package. Copied from openclaw@2026.9.6:
 *
 * - hook events/contexts: dist/hook-runner-global-*.d.ts (`PluginHookToolContext`,
 *   `PluginHookBeforeToolCallEvent`, `PluginHookBeforeToolCallResult`, `PluginHookAfterToolCallEvent`,
 *   `PluginHookAgentContext`, `PluginHookAgentEndEvent`, `PluginHookBeforeCompactionEvent`,
 *   `PluginHookAfterCompactionEvent`, `PluginHookSessionContext`, `PluginHookSessionStartEvent`,
 *   `PluginHookSessionEndEvent`, `PluginHookModelCallStartedEvent`, `PluginHookLlmOutputEvent`)
 * - agent events: dist/plugin-entry-*.d.ts (`AgentEventPayload`, `api.runtime.events.onAgentEvent`)
 * - registration: docs/plugins/hooks.md, docs/plugins/hooks/reference.md (`api.on(name, handler, opts)`)
 *
 * Every field is optional where OpenClaw says "may be absent for the emitting path".
 */

export interface PluginLogger {
  debug?(message: string, ...args: unknown[]): void;
  info?(message: string, ...args: unknown[]): void;
  warn(message: string, ...args: unknown[]): void;
  error(message: string, ...args: unknown[]): void;
}

export interface ToolContext {
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  runId?: string;
  toolName?: string;
  toolCallId?: string;
  abortSignal?: AbortSignal;
}

export interface BeforeToolCallEvent {
  toolName: string;
  params: Record<string, unknown>;
  runId?: string;
  toolCallId?: string;
}

export interface BeforeToolCallResult {
  params?: Record<string, unknown>;
  block?: boolean;
  blockReason?: string;
}

export interface AfterToolCallEvent {
  toolName: string;
  params: Record<string, unknown>;
  runId?: string;
  toolCallId?: string;
  result?: unknown;
  error?: string;
  durationMs?: number;
}

export interface AgentContext {
  runId?: string;
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  trigger?: string;
}

export interface AgentEndEvent {
  runId?: string;
  success: boolean;
  error?: string;
  durationMs?: number;
}

/** `llm_output` (PluginHookLlmOutputEvent): after a model call, with its usage when known. */
export interface LlmOutputEvent {
  runId?: string;
  sessionId?: string;
  provider?: string;
  model?: string;
  lastAssistant?: unknown;
  usage?: { input?: number; output?: number; cacheRead?: number; cacheWrite?: number; total?: number };
}

export interface ModelCallStartedEvent {
  runId: string;
  sessionKey?: string;
  sessionId?: string;
}

export interface CompactionContext {
  agentId?: string;
  sessionKey?: string;
  sessionId?: string;
  runId?: string;
}

export interface AfterCompactionEvent {
  messageCount?: number;
  compactedCount?: number;
  previousSessionId?: string;
}

export interface SessionContext {
  agentId?: string;
  sessionId: string;
  sessionKey?: string;
}

export interface SessionEndEvent {
  sessionId: string;
  sessionKey?: string;
  reason?: string;
  nextSessionId?: string;
}

/** One event of OpenClaw's in-process agent event bus (`api.runtime.events.onAgentEvent`). */
export interface AgentEventPayload {
  runId: string;
  seq?: number;
  stream: string;
  ts?: number;
  data: Record<string, unknown>;
  sessionKey?: string;
  sessionId?: string;
  agentId?: string;
}

/**
 * Tool-result middleware (`api.registerAgentToolResultMiddleware`, openclaw@2026.9.6
 * dist/plugin-entry-*.d.ts `AgentToolResultMiddleware*`): runs after a tool and before its
 * result goes back to the model; an installed plugin needs `contracts.agentToolResultMiddleware`
 * in its manifest for each runtime it names.
 */
export interface ToolResultContent {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface AgentToolResult {
  content: ToolResultContent[];
  details?: unknown;
  [key: string]: unknown;
}

export interface ToolResultMiddlewareEvent {
  toolCallId: string;
  toolName: string;
  args?: Record<string, unknown>;
  isError?: boolean;
  result: AgentToolResult;
}

export interface ToolResultMiddlewareContext {
  runtime?: string;
  agentId?: string;
  sessionId?: string;
  sessionKey?: string;
  runId?: string;
}

export interface ToolResultMiddlewareResult {
  result: AgentToolResult;
}

export interface HookOptions {
  priority?: number;
  timeoutMs?: number;
}

/** The registration API handed to `register(api)` (only what this plugin touches). */
export interface PluginApi {
  id?: string;
  registrationMode?: string;
  pluginConfig?: Record<string, unknown>;
  logger?: PluginLogger;
  on(hookName: string, handler: (event: any, ctx: any) => unknown, opts?: HookOptions): void;
  registerAgentToolResultMiddleware?(
    handler: (event: ToolResultMiddlewareEvent, ctx: ToolResultMiddlewareContext) => ToolResultMiddlewareResult | undefined | Promise<ToolResultMiddlewareResult | undefined>,
    options?: { runtimes?: string[]; matcher?: string[] },
  ): void;
  runtime?: {
    events?: { onAgentEvent?: (listener: (event: AgentEventPayload) => void) => () => void };
  };
}
