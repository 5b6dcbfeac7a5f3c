// Test helpers: OpenClaw's OWN hook runner and agent event bus (imported from the installed
// openclaw package, see e2e/node24.mjs), and a loopguard client replaced at the client boundary
// (the plugin's `connect` option) by a scripted one that records what would be published.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const openclawDir = process.env.OPENCLAW_PACKAGE_DIR;
if (!openclawDir) throw new Error('run the tests with `npm test` (node e2e/node24.mjs --test test/): OPENCLAW_PACKAGE_DIR is not set');
const requireFromRuntime = createRequire(path.join(openclawDir, '..', '..', 'package.json'));
const load = (specifier) => import(pathToFileURL(requireFromRuntime.resolve(specifier)).href);

export const openclaw = {
  hookRuntime: await load('openclaw/plugin-sdk/hook-runtime'), // initializeGlobalHookRunner, resetGlobalHookRunner
  pluginRuntime: await load('openclaw/plugin-sdk/plugin-runtime'), // getGlobalHookRunner
  harnessRuntime: await load('openclaw/plugin-sdk/agent-harness-runtime'), // onAgentEvent, emitAgentEvent
  version: JSON.parse(readFileSync(path.join(openclawDir, 'package.json'), 'utf8')).version,
};

export const plugin = await import(pathToFileURL(path.resolve(import.meta.dirname, '..', 'dist', 'index.js')).href);

export class RunAborted extends Error {
  constructor(decision) {
    super(`${decision.errorCode}: ${decision.reason}`);
    this.name = 'RunAborted';
    this.decision = decision;
  }
}

/** A scripted stand-in for @loopguard/client's GatewayClient (same method names and shapes). */
export class ScriptedClient {
  constructor() {
    this.published = []; // [{runId, kind, ...}]
    this.closed = false;
    /** (runId, toolName, args, n) => verdict | Error to throw */
    this.decide = () => ({ allowed: true, warnings: [], timedOut: false });
  }
  startRun({ agentId, runId, sessionId = null, trigger = null }) {
    const client = this;
    let n = 0;
    client.published.push({ runId, kind: 'run_started', agentId, sessionId, trigger });
    return {
      runId,
      async beforeTool(toolName, args, toolCallId) {
        n += 1;
        const verdict = client.decide(runId, toolName, args, n);
        if (verdict instanceof Error) throw verdict;
        client.published.push({ runId, kind: 'tool_call', toolName, args, toolCallId });
        if (!verdict.allowed) client.published.push({ runId, kind: 'tool_result', toolName, refused: true, toolCallId });
        return verdict;
      },
      async afterTool(toolName, args, outcome = {}) {
        client.published.push({ runId, kind: 'tool_result', toolName, result: outcome.result, error: outcome.error ?? null, toolCallId: outcome.toolCallId });
      },
      async compaction(trigger = 'context_overflow') {
        client.published.push({ runId, kind: 'compaction_retry', trigger });
      },
      async end(status = 'completed') {
        client.published.push({ runId, kind: 'run_ended', status });
      },
      reportUsage(usage) {
        client.published.push({ runId, kind: 'usage', ...usage });
      },
    };
  }
  async close() {
    this.closed = true;
  }
  kinds(runId) {
    return this.published.filter((e) => !runId || e.runId === runId).map((e) => e.kind);
  }
}

export function memoryLogger() {
  const lines = [];
  const at = (level) => (message) => lines.push(`${level} ${message}`);
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * Register the plugin the way OpenClaw's loader does (register(api) with api.on), put its typed
 * hooks in a registry and hand that to OpenClaw's global hook runner; returns the runner.
 */
export async function loadIntoHookRunner({ config = {}, connect, abortRun, mode = 'full' } = {}) {
  await plugin.resetSharedGuard();
  openclaw.hookRuntime.resetGlobalHookRunner?.();
  const logger = memoryLogger();
  const registry = { plugins: [{ id: 'loopguard', status: 'loaded' }], hooks: [], typedHooks: [], trustedToolPolicies: [] };
  const middlewares = []; // api.registerAgentToolResultMiddleware(handler, options)
  const entry = plugin.createLoopguardPlugin({ connect, abortRun });
  const api = {
    id: 'loopguard',
    registrationMode: mode,
    pluginConfig: config,
    logger,
    on(hookName, handler, opts = {}) {
      registry.typedHooks.push({ pluginId: 'loopguard', hookName, handler, priority: opts.priority ?? 0, source: 'test', ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}) });
    },
    registerAgentToolResultMiddleware(handler, options = {}) {
      middlewares.push({ handler, options });
    },
    runtime: { events: { onAgentEvent: openclaw.harnessRuntime.onAgentEvent } },
  };
  entry.register(api);
  openclaw.hookRuntime.initializeGlobalHookRunner(registry);
  const runner = openclaw.pluginRuntime.getGlobalHookRunner();
  return { runner, registry, logger, middlewares };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function eventually(check, timeoutMs = 2000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return check();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(10);
    }
  }
}
