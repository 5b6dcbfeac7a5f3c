// The plugin through OpenClaw's real plugin loader: `openclaw plugins inspect --runtime --json`
// discovers it from plugins.load.paths, validates its config against openclaw.plugin.json,
// imports dist/index.js and runs register(api) (docs/plugins/hooks.md, "Troubleshooting").
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

const PLUGIN_DIR = path.resolve(import.meta.dirname, '..');
const HOOKS = ['after_compaction', 'after_tool_call', 'agent_end', 'before_compaction', 'before_tool_call', 'gateway_start', 'gateway_stop', 'llm_output', 'model_call_started', 'session_end', 'session_start'];

function inspect(entry) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loopguard-openclaw-loader-'));
  try {
    const configPath = path.join(dir, 'openclaw.json');
    fs.writeFileSync(configPath, JSON.stringify({ plugins: { load: { paths: [PLUGIN_DIR] }, entries: { loopguard: entry } } }));
    const r = spawnSync(process.env.OPENCLAW_NODE_BIN, [process.env.OPENCLAW_ENTRY, 'plugins', 'inspect', 'loopguard', '--runtime', '--json'], {
      encoding: 'utf8',
      env: { ...process.env, HOME: dir, OPENCLAW_HOME: dir, OPENCLAW_STATE_DIR: dir, OPENCLAW_CONFIG_PATH: configPath, NO_COLOR: '1' },
      timeout: 120_000,
    });
    const start = r.stdout.indexOf('{');
    return { status: r.status, stderr: r.stderr, json: start >= 0 ? JSON.parse(r.stdout.slice(start)) : undefined };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('OpenClaw loads the plugin from plugins.load.paths and registers every hook', () => {
  const r = inspect({
    enabled: true,
    hooks: { allowConversationAccess: true },
    config: { brokers: ['127.0.0.1:9'], gatewayId: 'gw-loader', waitBudgetMs: 50, failMode: 'open' },
  });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.json.plugin.id, 'loopguard');
  assert.equal(r.json.plugin.status, 'loaded');
  assert.equal(r.json.plugin.configSchema, true);
  assert.deepEqual(r.json.typedHooks.map((h) => h.name).sort(), HOOKS);
  assert.ok(!r.json.diagnostics.some((d) => d.level === 'error'), JSON.stringify(r.json.diagnostics));
});

test('without conversation access OpenClaw withholds agent_end and llm_output only (runs then end from lifecycle events, and report no usage)', () => {
  const r = inspect({ enabled: true, config: { brokers: '127.0.0.1:9' } });
  assert.equal(r.status, 0, r.stderr);
  const conversation = ['agent_end', 'llm_output'];
  assert.deepEqual(r.json.typedHooks.map((h) => h.name).sort(), HOOKS.filter((h) => !conversation.includes(h)));
  assert.ok(r.json.diagnostics.some((d) => /agent_end/.test(d.message)));
});

test("OpenClaw rejects a config that does not match the manifest's configSchema", () => {
  const r = inspect({ enabled: true, config: { brokers: ['127.0.0.1:9'], failMode: 'sideways', waitBudgetMs: -1 } });
  assert.notEqual(r.status, 0);
  const paths = (r.json?.issues ?? []).map((i) => i.path).sort();
  assert.deepEqual(paths, ['plugins.entries.loopguard.config.failMode', 'plugins.entries.loopguard.config.waitBudgetMs']);
});
