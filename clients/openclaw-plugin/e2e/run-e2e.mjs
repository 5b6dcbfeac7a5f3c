#!/usr/bin/env node
// End-to-end harness: the REAL OpenClaw (pinned, installed from the npm registry by
// setup-openclaw.mjs), headless (`openclaw agent --local`, the embedded runner, no Gateway, no
// channel, no onboarding), with this plugin loaded from plugins.load.paths, its model a scripted
// OpenAI-compatible server on 127.0.0.1 (model-server.mjs) that asks for the same tool call
// over and over, and loopguard's Kafka at $LOOPGUARD_TEST_BOOTSTRAP. Runs one agent turn and
// prints one JSON document on stdout: what OpenClaw executed, what loopguard blocked, the abort.
//
//   node e2e/run-e2e.mjs [--prompt TEXT] [--max-tool-calls N] [--overflow-at N] [--pause-after-refusal FILE] [--timeout SECONDS] [--keep]
//
//   --max-tool-calls N  the model asks for the tool N times, then answers in text (default 30)
//   --overflow-at N     the model's first request carrying N tool results fails with
//                       context_length_exceeded (once): OpenClaw compacts and retries the turn
//   --pause-after-refusal FILE  once the model has seen a refused call (loopguard's refusal as
//                       a tool result), its next answer waits until FILE exists: a test acts as
//                       an operator meanwhile (e.g. `loopguard release`), then creates FILE
//   --gateway           run a real Gateway (`openclaw gateway run`, loopback, token auth) with the
//                       plugin loaded in it, and send the turn through it (`openclaw agent`
//                       without --local); default: the embedded runner (`agent --local`)
//
// env:
//   LOOPGUARD_TEST_BOOTSTRAP   Kafka bootstrap (host:port[,host:port]); unset: the plugin is inert
//   LOOPGUARD_TOPIC_PREFIX     topic prefix (default loopguard)
//   LOOPGUARD_GATEWAY_ID       gateway id (default openclaw-e2e)
//   LOOPGUARD_WAIT_BUDGET_MS   plugin waitBudgetMs (default 1000 here, so verdicts are deterministic;
//                              the plugin's own default is 50)
//   LOOPGUARD_FAIL_MODE        open | closed (default open)
//   LOOPGUARD_CONNECT_WAIT_MS  plugin connectWaitMs (default: the plugin's, 3000): how long the
//                              run's first call waits for the Kafka connection (a 3-broker
//                              cluster on a loaded host can take longer than 3 s)
//   LOOPGUARD_AGENT_ID         OpenClaw agent id (default main)
//   LOOPGUARD_RUN_SESSION_ID   OpenClaw session id (default a fresh one)
//   MODEL_TOOL, MODEL_TOOL_ARGS  the looping tool call (default read {"path":"loop.txt"})
//   E2E_OPENCLAW_LOOP_DETECTION  on: keep OpenClaw's own tools.loopDetection (default: enabled=false)
//   E2E_FILE_BYTES             size of loop.txt (default 40000 with --overflow-at, else one line)
//   E2E_DIR                    scratch directory (default a fresh one under the OS temp dir)
//   OPENCLAW_RUNTIME_DIR, OPENCLAW_NODE, OPENCLAW_VERSION: see setup-openclaw.mjs
//
// Exit status: 0 when the harness ran (whatever the agent did: read the JSON), 2 when it could
// not (setup failed, OpenClaw did not produce a result).
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PLUGIN_DIR, ensureOpenClawRuntime } from './setup-openclaw.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const args = { prompt: 'Read loop.txt and tell me what it says.', maxToolCalls: 30, overflowAt: 0, pauseFile: '', timeout: 240, keep: false, gateway: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--prompt') args.prompt = argv[++i];
    else if (a === '--max-tool-calls') args.maxToolCalls = Number(argv[++i]);
    else if (a === '--overflow-at') args.overflowAt = Number(argv[++i]);
    else if (a === '--pause-after-refusal') args.pauseFile = path.resolve(argv[++i]);
    else if (a === '--timeout') args.timeout = Number(argv[++i]);
    else if (a === '--keep') args.keep = true;
    else if (a === '--gateway') args.gateway = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return args;
}

function readJsonLines(file) {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          return { unparsable: l };
        }
      });
  } catch {
    return [];
  }
}

/** Start model-server.mjs; resolves with {child, port} once it listens. */
function startModelServer(env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(here, 'model-server.mjs')], { env: { ...process.env, ...env, MODEL_PORT: '0' }, stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    const onData = (chunk) => {
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      child.stdout.off('data', onData);
      try {
        resolve({ child, port: JSON.parse(buf.slice(0, nl)).port });
      } catch (error) {
        reject(error);
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.on('exit', (code) => reject(new Error(`model server exited (${code})`)));
  });
}

function run(cmd, args, options, timeoutMs) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(cmd, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut, durationMs: Date.now() - started });
    });
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Start `openclaw gateway run`; resolves once it logs "ready" (or rejects with its log tail). */
function startGateway(nodeBin, entry, env, cwd, timeoutMs) {
  return new Promise((resolve, reject) => {
    const child = spawn(nodeBin, [entry, 'gateway', 'run'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const onData = (d) => {
      log += d;
      if (/\[gateway\] ready/.test(log)) {
        clearTimeout(timer);
        resolve({ child, log: () => log });
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', (d) => (log += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway not ready after ${timeoutMs} ms: ${log.split('\n').slice(-15).join('\n')}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited (${code}): ${log.split('\n').slice(-15).join('\n')}`));
    });
  });
}

async function stopGateway(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
}

function parseOpenClawJson(stdout) {
  const start = stdout.indexOf('{');
  if (start < 0) return undefined;
  try {
    return JSON.parse(stdout.slice(start));
  } catch {
    return undefined;
  }
}

function toolText(message) {
  const c = message?.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === 'string' ? p : p?.text ?? '')).join('');
  return '';
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const result = { ok: false, harness: 'openclaw agent --local', plugin: PLUGIN_DIR };
  let runtime;
  try {
    runtime = ensureOpenClawRuntime({ quiet: true });
  } catch (error) {
    result.error = `setup: ${error.message}`;
    return { result, exit: 2 };
  }
  result.openclawVersion = runtime.openclawVersion;
  result.nodeVersion = runtime.nodeVersion;
  if (!fs.existsSync(path.join(PLUGIN_DIR, 'dist', 'index.js'))) {
    result.error = 'the plugin is not built (npm run build)';
    return { result, exit: 2 };
  }
  if (process.env.LOOPGUARD_TEST_BOOTSTRAP && !fs.existsSync(path.join(PLUGIN_DIR, 'node_modules', '@loopguard', 'client', 'dist', 'index.js'))) {
    result.error = '@loopguard/client is not installed/built (npm run build:client && npm install)';
    return { result, exit: 2 };
  }

  const dir = process.env.E2E_DIR ? path.resolve(process.env.E2E_DIR) : fs.mkdtempSync(path.join(os.tmpdir(), 'loopguard-openclaw-e2e-'));
  const stateDir = path.join(dir, 'state');
  const home = path.join(dir, 'home');
  const workspace = path.join(dir, 'workspace');
  for (const d of [stateDir, home, workspace]) fs.mkdirSync(d, { recursive: true });
  // With --overflow-at the file is large, so the history is big enough for OpenClaw to compact
  // (it keeps the most recent ~20k tokens and refuses to compact a smaller session).
  const fileBytes = Number(process.env.E2E_FILE_BYTES || (args.overflowAt > 0 ? 40_000 : 0));
  let content = 'hello from the loop\n';
  for (let i = 0; content.length < fileBytes; i++) content += `line ${i}: the same content every time, nothing changes here\n`;
  fs.writeFileSync(path.join(workspace, 'loop.txt'), content);
  const tracePath = path.join(dir, 'plugin-trace.jsonl');
  const modelLog = path.join(dir, 'model-requests.jsonl');
  for (const f of [tracePath, modelLog]) fs.rmSync(f, { force: true });
  result.dir = dir;

  const { child: model, port } = await startModelServer({
    MODEL_LOG: modelLog,
    MODEL_MAX_TOOL_CALLS: String(args.maxToolCalls),
    MODEL_OVERFLOW_AT: String(args.overflowAt),
    ...(args.pauseFile ? { MODEL_PAUSE_FILE: args.pauseFile } : {}),
  });
  try {
    const brokers = (process.env.LOOPGUARD_TEST_BOOTSTRAP || '').split(',').map((s) => s.trim()).filter(Boolean);
    const agentId = process.env.LOOPGUARD_AGENT_ID || 'main';
    const pluginConfig = {
      brokers,
      topicPrefix: process.env.LOOPGUARD_TOPIC_PREFIX || 'loopguard',
      gatewayId: process.env.LOOPGUARD_GATEWAY_ID || 'openclaw-e2e',
      waitBudgetMs: Number(process.env.LOOPGUARD_WAIT_BUDGET_MS || 1000),
      failMode: process.env.LOOPGUARD_FAIL_MODE || 'open',
      ...(process.env.LOOPGUARD_CONNECT_WAIT_MS ? { connectWaitMs: Number(process.env.LOOPGUARD_CONNECT_WAIT_MS) } : {}),
    };
    if (brokers.length === 0) delete pluginConfig.brokers;
    const config = {
      models: {
        mode: 'replace',
        providers: {
          loopmodel: {
            baseUrl: `http://127.0.0.1:${port}/v1`,
            apiKey: 'e2e-no-key',
            api: 'openai-completions',
            models: [
              {
                id: 'loop-model',
                name: 'scripted loop model',
                reasoning: false,
                input: ['text'],
                contextWindow: 128000,
                maxTokens: 4096,
                cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
              },
            ],
          },
        },
      },
      agents: { defaults: { model: { primary: 'loopmodel/loop-model' }, workspace } },
      // OpenClaw's own loop detection and post-compaction guard off, so loopguard is the only guard
      // (E2E_OPENCLAW_LOOP_DETECTION=on keeps OpenClaw's defaults)
      ...(process.env.E2E_OPENCLAW_LOOP_DETECTION === 'on' ? {} : { tools: { loopDetection: { enabled: false } } }),
      plugins: {
        load: { paths: [PLUGIN_DIR] },
        entries: {
          loopguard: { enabled: true, hooks: { allowConversationAccess: true }, config: pluginConfig },
        },
      },
    };
    const gatewayToken = `e2e-${randomUUID()}`;
    if (args.gateway) config.gateway = { mode: 'local', port: await freePort(), bind: 'loopback', auth: { mode: 'token', token: gatewayToken } };
    const configPath = path.join(stateDir, 'openclaw.json');
    fs.writeFileSync(configPath, JSON.stringify(config, null, 2));
    result.pluginConfig = pluginConfig;

    const sessionId = process.env.LOOPGUARD_RUN_SESSION_ID || `e2e-${randomUUID()}`;
    const env = {
      ...process.env,
      HOME: home,
      OPENCLAW_HOME: home,
      OPENCLAW_STATE_DIR: stateDir,
      OPENCLAW_CONFIG_PATH: configPath,
      LOOPGUARD_OPENCLAW_TRACE: tracePath,
      NO_COLOR: '1',
      FORCE_COLOR: '0',
      ...(args.gateway ? { OPENCLAW_GATEWAY_TOKEN: gatewayToken } : {}),
    };
    let gateway;
    if (args.gateway) {
      try {
        gateway = await startGateway(runtime.nodeBin, runtime.openclawEntry, env, workspace, 240_000);
      } catch (error) {
        result.error = `gateway: ${error.message}`;
        return { result, exit: 2, cleanup: args.keep || process.env.E2E_DIR ? undefined : dir };
      }
      result.harness = 'openclaw gateway run + openclaw agent';
    }
    const cliArgs = [runtime.openclawEntry, 'agent', ...(args.gateway ? [] : ['--local']), '--agent', agentId, '--session-id', sessionId, '-m', args.prompt, '--json', '--timeout', String(args.timeout)];
    result.command = ['node', ...cliArgs.map((a) => (a.includes(' ') ? JSON.stringify(a) : a))].join(' ');
    let proc = await run(runtime.nodeBin, cliArgs, { cwd: workspace, env }, (args.timeout + 60) * 1000);
    if (/Plugin source changed while preparing its reload/.test(proc.stdout + proc.stderr)) {
      // OpenClaw fingerprints the plugin's files (and its linked dependencies) while loading it;
      // a build running next to us changed them: once more
      result.retriedAfterSourceChange = true;
      for (const f of [tracePath, modelLog]) fs.rmSync(f, { force: true });
      proc = await run(runtime.nodeBin, cliArgs, { cwd: workspace, env: { ...env }, }, (args.timeout + 60) * 1000);
    }
    if (gateway) {
      await stopGateway(gateway.child); // gateway_stop: the plugin ends open runs and closes its client
      result.gatewayLogTail = gateway.log().split('\n').filter((l) => l.trim()).slice(-25);
    }
    const out = parseOpenClawJson(proc.stdout);
    const trace = readJsonLines(tracePath);
    const requests = readJsonLines(modelLog);

    // What the agent saw as tool results, from the last model request's conversation.
    const last = [...requests].reverse().find((r) => Array.isArray(r.toolResultsText));
    const toolResults = last?.toolResultsText ?? [];
    const before = trace.filter((r) => r.event === 'before_tool_call');
    const blocked = before.filter((r) => r.outcome === 'blocked');
    const abortRecord = trace.find((r) => r.event === 'aborted');
    const meta = out?.meta ?? {};
    result.exitCode = proc.code;
    result.signal = proc.signal;
    result.timedOut = proc.timedOut;
    result.durationMs = proc.durationMs;
    result.sessionId = sessionId;
    result.runIds = [...new Set(trace.map((r) => r.runId).filter(Boolean))];
    result.openclaw = out
      ? {
          ok: out.ok !== false && proc.code === 0,
          error: out.error?.message ?? meta.error?.message ?? (out.status && out.status !== 'ok' ? `${out.status}: ${out.summary ?? ''}` : undefined),
          status: out.status,
          stopReason: meta.stopReason ?? meta.agentMeta?.stopReason,
          toolSummary: meta.toolSummary,
          final: Array.isArray(out.payloads) ? out.payloads.map((p) => p.text).filter(Boolean).join('\n') : undefined,
        }
      : { ok: false, error: 'no JSON result on stdout' };
    result.plugin = {
      loaded: trace.length > 0 || /loopguard/.test(proc.stderr),
      connected: trace.some((r) => r.event === 'connected'),
      connectFailures: trace.filter((r) => r.event === 'connect_failed').map((r) => r.error),
    };
    result.toolCalls = {
      requestedByModel: requests.filter((r) => r.answer?.kind === 'tool').length,
      contextOverflowsServed: requests.filter((r) => r.answer?.kind === 'overflow').length,
      seenByPlugin: before.length,
      executed: trace.filter((r) => r.event === 'after_tool_call' && !r.error).length,
      failed: trace.filter((r) => r.event === 'after_tool_call' && r.error).length,
      allowed: before.filter((r) => r.outcome === 'allowed').length,
      allowedFailOpen: before.filter((r) => r.outcome === 'allowed_fail_open').length,
      refusedFailClosed: before.filter((r) => r.outcome === 'refused_fail_closed').length,
      blocked: blocked.length,
      blockedAfterAbort: before.filter((r) => r.outcome === 'blocked_after_abort').length,
      blockReasons: [...new Set(blocked.map((r) => r.reason))],
      warnings: before.flatMap((r) => r.warnings ?? []),
    };
    result.abort = abortRecord
      ? {
          errorCode: abortRecord.errorCode,
          reason: abortRecord.reason,
          openclawRunStopped: trace.find((r) => r.event === 'openclaw_abort')?.stopped ?? false,
        }
      : null;
    result.compactions = trace.filter((r) => r.event === 'compaction');
    result.runsEnded = trace.filter((r) => r.event === 'run_ended').map((r) => ({ runId: r.runId, status: r.status, published: r.published }));
    result.toolResultsSeenByModel = toolResults.map((t) => (t.length > 200 ? t.slice(0, 200) + '…' : t));
    result.modelRequests = requests.length;
    // with --pause-after-refusal: how long the model waited after the refusal (null: never paused)
    result.modelPausedMs = requests.find((r) => r.pausedMs !== undefined)?.pausedMs ?? null;
    result.trace = trace;
    result.stderrTail = proc.stderr.split('\n').filter((l) => l.trim()).slice(-25);
    result.ok = Boolean(out) && !proc.timedOut;
    return { result, exit: result.ok ? 0 : 2, cleanup: args.keep || process.env.E2E_DIR ? undefined : dir };
  } finally {
    model.kill('SIGTERM');
  }
}

main()
  .then(({ result, exit, cleanup }) => {
    process.stdout.write(JSON.stringify(result, null, 2) + '\n');
    if (cleanup) fs.rmSync(cleanup, { recursive: true, force: true });
    process.exit(exit);
  })
  .catch((error) => {
    process.stdout.write(JSON.stringify({ ok: false, error: String(error?.stack ?? error) }, null, 2) + '\n');
    process.exit(2);
  });
