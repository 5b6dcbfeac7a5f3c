/**
 * @loopguard/openclaw-plugin: OpenClaw plugin entry.
 *
 * Registers typed hooks with `api.on(...)` (OpenClaw's plugin hook API). OpenClaw calls
 * `register(api)` more than once per process (registration modes "full", "discovery",
 * "tool-discovery"; the hook runner dispatches to the most recently activated registry), so
 * every registration registers the hooks, and all of them share one LoopguardGuard per process
 * and config. Nothing connects to Kafka at registration: the connection is made on the first
 * run signal (gateway_start, session_start, a model call, a run's lifecycle start, a tool call).
 */
import { appendFileSync } from 'node:fs';
import { resolveConfig, type LoopguardPluginConfig } from './config.js';
import { type ClientLike, type ConnectOptions, type GuardDeps, LoopguardGuard } from './guard.js';
import type { PluginApi, PluginLogger } from './openclaw-types.js';

export { LoopguardGuard, IN_RUN_COMPACTION_TRIGGER, agentIdFromSessionKey, jsonSafe, noteOf, withoutNote } from './guard.js';
export type { ClientLike, ConnectOptions, DecisionLike, GuardDeps, RunLike, VerdictLike } from './guard.js';
export { resolveConfig, DEFAULTS } from './config.js';
export type { LoopguardPluginConfig, FailMode } from './config.js';

export const PLUGIN_ID = 'loopguard';

const consoleLogger: PluginLogger = {
  debug: () => undefined,
  info: (m) => console.info(`[loopguard] ${m}`),
  warn: (m) => console.warn(`[loopguard] ${m}`),
  error: (m) => console.error(`[loopguard] ${m}`),
};

/** A logger that never throws, over OpenClaw's `api.logger`. */
function safeLogger(logger: PluginLogger | undefined): PluginLogger {
  const base = logger ?? consoleLogger;
  const wrap =
    (name: keyof PluginLogger) =>
    (message: string, ...args: unknown[]) => {
      try {
        const fn = base[name] ?? (name === 'debug' ? undefined : base.warn);
        fn?.call(base, message, ...args);
      } catch {
        // logging must never break a hook
      }
    };
  return { debug: wrap('debug'), info: wrap('info'), warn: wrap('warn'), error: wrap('error') };
}

/** Default client factory: @loopguard/client's GatewayClient, loaded lazily (a missing client only disables the guard). */
export async function connectLoopguardClient(options: ConnectOptions): Promise<ClientLike> {
  const mod = (await import('@loopguard/client')) as Record<string, any>;
  const GatewayClient = mod.GatewayClient ?? mod.default?.GatewayClient;
  if (!GatewayClient?.connect) throw new Error('@loopguard/client does not export GatewayClient.connect');
  return (await GatewayClient.connect({
    brokers: options.brokers,
    gatewayId: options.gatewayId,
    topicPrefix: options.topicPrefix,
    waitBudgetMs: options.waitBudgetMs,
    failMode: options.failMode,
    logger: options.logger,
    onDecision: options.onDecision,
    maxEventsPerPartition: options.maxEventsPerPartition ?? 0,
    controlTopicWaitMs: 10_000,
    // bounded connection attempts: the plugin retries by itself (reconnectMs)
    kafka: { connectionTimeout: 3000, retry: { retries: 2, initialRetryTime: 200, maxRetryTime: 1000 }, logLevel: 0 },
  })) as ClientLike;
}

/** Default run abort: OpenClaw's own abort of the session's active embedded run (plugin SDK). */
export async function abortOpenClawRun(sessionId: string): Promise<boolean> {
  const sdkPath = 'openclaw/plugin-sdk/agent-harness-runtime';
  const sdk = (await import(sdkPath)) as { abortAgentHarnessRun?: (sessionId: string) => boolean };
  if (typeof sdk.abortAgentHarnessRun !== 'function') throw new Error(`${sdkPath} has no abortAgentHarnessRun`);
  return sdk.abortAgentHarnessRun(sessionId);
}

/** LOOPGUARD_OPENCLAW_TRACE=<file>: append one JSON line per plugin decision (e2e harness, debugging). */
function traceSink(): ((record: Record<string, unknown>) => void) | undefined {
  const file = process.env.LOOPGUARD_OPENCLAW_TRACE;
  if (!file) return undefined;
  return (record) => appendFileSync(file, JSON.stringify({ pid: process.pid, ...record }) + '\n');
}

const SHARED = Symbol.for('loopguard.openclaw-plugin.guard');
type Shared = { key: string; guard: LoopguardGuard };
const globalSlot = globalThis as unknown as Record<symbol, Shared | undefined>;

/** The process-wide guard for this config (a changed config replaces and closes the old one). */
export function sharedGuard(config: LoopguardPluginConfig, deps: GuardDeps): LoopguardGuard {
  const key = JSON.stringify(config);
  const current = globalSlot[SHARED];
  if (current && current.key === key) return current.guard;
  if (current) void current.guard.close('plugin_reloaded').catch(() => undefined);
  const guard = new LoopguardGuard(config, deps);
  globalSlot[SHARED] = { key, guard };
  return guard;
}

/** Forget the shared guard (tests). */
export async function resetSharedGuard(): Promise<void> {
  const current = globalSlot[SHARED];
  globalSlot[SHARED] = undefined;
  if (current) await current.guard.close('reset').catch(() => undefined);
}

/** Register every hook on `api`, delegating to `guard`. */
export function registerHooks(api: PluginApi, guard: LoopguardGuard): void {
  api.on('before_tool_call', (event, ctx) => guard.beforeToolCall(event, ctx));
  api.on('after_tool_call', (event, ctx) => guard.afterToolCall(event, ctx));
  api.on('model_call_started', (event, ctx) => guard.modelCallStarted(event, ctx));
  api.on('agent_end', (event, ctx) => guard.agentEnd(event, ctx));
  api.on('llm_output', (event, ctx) => guard.llmOutput(event, ctx));
  api.on('before_compaction', (event, ctx) => guard.beforeCompaction(event, ctx));
  api.on('after_compaction', (event, ctx) => guard.afterCompaction(event, ctx));
  api.on('session_start', (event, ctx) => guard.sessionStart(event, ctx));
  api.on('session_end', (event, ctx) => guard.sessionEnd(event, ctx));
  api.on('gateway_start', () => guard.ensureConnecting());
  api.on('gateway_stop', () => guard.close('gateway_stop'));
  guard.subscribe(api.runtime?.events?.onAgentEvent);
  // Warnings worded for the model (issue 43) go on the next tool result before the model sees it.
  try {
    api.registerAgentToolResultMiddleware?.((event, ctx) => guard.toolResultForModel(event, ctx), { runtimes: ['openclaw'] });
  } catch (error) {
    guard.log.warn(`loopguard: cannot register the tool-result middleware; warnings for the model reach the log only (${String(error)})`);
  }
}

export interface CreatePluginOptions {
  connect?: GuardDeps['connect'];
  abortRun?: GuardDeps['abortRun'];
  /** Use this guard instead of the process-wide one (tests). */
  guard?: LoopguardGuard;
}

/** Build the plugin entry; the default export uses the real client and OpenClaw's run abort. */
export function createLoopguardPlugin(options: CreatePluginOptions = {}) {
  return {
    id: PLUGIN_ID,
    name: 'loopguard',
    description: 'Publishes tool calls to loopguard and obeys its warn/block/abort decisions.',
    register(api: PluginApi): void {
      const logger = safeLogger(api.logger);
      try {
        const { config, warnings } = resolveConfig(api.pluginConfig);
        for (const warning of warnings) logger.warn(`loopguard config: ${warning}`);
        const guard =
          options.guard ??
          sharedGuard(config, {
            connect: options.connect ?? connectLoopguardClient,
            abortRun: options.abortRun ?? abortOpenClawRun,
            logger,
            trace: traceSink(),
          });
        registerHooks(api, guard);
      } catch (error) {
        // never take the gateway down: a plugin that cannot register stays inert
        logger.error(`loopguard: registration failed, tool calls are not guarded: ${String(error)}`);
      }
    },
  };
}

const plugin = createLoopguardPlugin();
export default plugin;
