/** A recording Transport and a tiny stand-in for the worker, for tests without a broker. */

import {
  type AgentEvent,
  type Decision,
  type DecisionInput,
  GatewayClient,
  type GatewayClientOptions,
  type Logger,
  type Transport,
  decodeEvent,
  encodeDecision,
  encodeWatermark,
  encodeWatermarks,
} from '../src';

export interface Sent {
  topic: string;
  key: string;
  value: Buffer;
  headers?: Record<string, string>;
}

export class RecordingTransport implements Transport {
  readonly sent: Sent[] = [];
  /** Set to make sends fail (the error) or take time (ms). */
  failWith?: Error;
  delayMs = 0;
  closed = false;

  async send(topic: string, key: Buffer, value: Buffer, headers?: Record<string, string>): Promise<void> {
    if (this.delayMs) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    if (this.failWith) throw this.failWith;
    this.sent.push({ topic, key: key.toString('utf8'), value, ...(headers ? { headers } : {}) });
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  events(topic = 'loopguard.events'): AgentEvent[] {
    return this.sent.filter((s) => s.topic === topic).map((s) => decodeEvent(s.value));
  }
}

export class CapturingLogger implements Logger {
  readonly lines: { level: string; message: string }[] = [];
  debug = (message: string) => void this.lines.push({ level: 'debug', message });
  info = (message: string) => void this.lines.push({ level: 'info', message });
  warn = (message: string) => void this.lines.push({ level: 'warn', message });
  error = (message: string) => void this.lines.push({ level: 'error', message });

  at(level: string): string[] {
    return this.lines.filter((l) => l.level === level).map((l) => l.message);
  }
}

export function makeClient(options: Partial<GatewayClientOptions> = {}) {
  const transport = new RecordingTransport();
  const logger = new CapturingLogger();
  const client = GatewayClient.withTransport({ gatewayId: 'gw-ts', logger, ...options }, transport);
  return { client, transport, logger };
}

let counter = 0;

/** A decision as the worker would publish it for `runId` at `seq`. */
export function decisionFor(runId: string, seq: number, action: Decision['action'], extra: Partial<DecisionInput> = {}): Buffer {
  counter++;
  return encodeDecision({
    runId,
    agentId: 'agent',
    gatewayId: 'gw-ts',
    seq,
    eventTime: Date.now(),
    action,
    detector: extra.detector ?? `detector-${counter}`,
    severity: action === 'warn' ? 'warning' : 'critical',
    count: 10,
    toolName: 'exec',
    reason: `${action} because of a loop`,
    ...extra,
  });
}

export function watermarkFor(runId: string, seq: number): Buffer {
  return encodeWatermark({ runId, gatewayId: 'gw-ts', seq, agentId: 'agent', eventTime: Date.now() });
}

/** One RunWatermarks record (issue 24) with a watermark per `[runId, seq]`, as a worker batch writes it. */
export function watermarksFor(...marks: [runId: string, seq: number][]): Buffer {
  return encodeWatermarks(marks.map(([runId, seq]) => ({ runId, gatewayId: 'gw-ts', seq, agentId: 'agent', eventTime: Date.now() })));
}
