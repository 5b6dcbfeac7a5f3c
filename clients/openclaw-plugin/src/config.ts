import { hostname } from 'node:os';

export type FailMode = 'open' | 'closed';

/** The plugin's settings (`plugins.entries.loopguard.config` in openclaw.json), defaults applied. */
export interface LoopguardPluginConfig {
  /** Kafka bootstrap servers; empty: the plugin is inert (logs once, allows every call). */
  brokers: string[];
  topicPrefix: string;
  gatewayId: string;
  /** How long a tool call waits for loopguard to catch up with the run (client `waitBudgetMs`). */
  waitBudgetMs: number;
  /** What happens when loopguard cannot answer (not connected, timed out, plugin error). */
  failMode: FailMode;
  /** How long a tool call waits for a connection attempt that is under way. */
  connectWaitMs: number;
  /** Delay before another connection attempt after a failed one. */
  reconnectMs: number;
  /** On an abort decision, also abort the OpenClaw run (else: block each further call). */
  abortStopsRun: boolean;
  /** Events of one partition a produce request carries at most (client option; 0: no limit, 1 on tansu). */
  maxEventsPerPartition: number;
}

export const DEFAULTS = {
  topicPrefix: 'loopguard',
  waitBudgetMs: 50,
  failMode: 'open' as FailMode,
  connectWaitMs: 3000,
  reconnectMs: 10_000,
  abortStopsRun: true,
  maxEventsPerPartition: 0,
};

function int(value: unknown, fallback: number, min: number, max: number): number {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n)) return fallback;
  return Math.min(max, Math.max(min, Math.floor(n)));
}

/**
 * Resolve the raw plugin config. OpenClaw validates it against openclaw.plugin.json first; this
 * stays lenient anyway (a bad value falls back to its default) because the plugin must never
 * take the gateway down. Problems are returned as warnings for the caller to log.
 */
export function resolveConfig(raw: Record<string, unknown> | undefined): { config: LoopguardPluginConfig; warnings: string[] } {
  const warnings: string[] = [];
  const input = raw ?? {};
  let brokers: string[] = [];
  if (Array.isArray(input.brokers)) brokers = input.brokers.map(String);
  else if (typeof input.brokers === 'string') brokers = input.brokers.split(',');
  brokers = brokers.map((b) => b.trim()).filter(Boolean);
  let failMode = DEFAULTS.failMode;
  if (input.failMode === 'open' || input.failMode === 'closed') failMode = input.failMode;
  else if (input.failMode !== undefined) warnings.push(`failMode ${JSON.stringify(input.failMode)} is not 'open' or 'closed'; using 'open'`);
  const topicPrefix = typeof input.topicPrefix === 'string' && input.topicPrefix.trim() ? input.topicPrefix.trim() : DEFAULTS.topicPrefix;
  const gatewayId =
    typeof input.gatewayId === 'string' && input.gatewayId.trim() ? input.gatewayId.trim() : `openclaw-${safeHostname()}`;
  return {
    config: {
      brokers,
      topicPrefix,
      gatewayId,
      waitBudgetMs: int(input.waitBudgetMs, DEFAULTS.waitBudgetMs, 0, 10_000),
      failMode,
      connectWaitMs: int(input.connectWaitMs, DEFAULTS.connectWaitMs, 0, 60_000),
      reconnectMs: int(input.reconnectMs, DEFAULTS.reconnectMs, 100, 3_600_000),
      abortStopsRun: typeof input.abortStopsRun === 'boolean' ? input.abortStopsRun : DEFAULTS.abortStopsRun,
      maxEventsPerPartition: int(input.maxEventsPerPartition, DEFAULTS.maxEventsPerPartition, 0, 1_000_000),
    },
    warnings,
  };
}

function safeHostname(): string {
  try {
    return hostname() || 'unknown';
  } catch {
    return 'unknown';
  }
}
