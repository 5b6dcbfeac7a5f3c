#!/usr/bin/env node
// Run node with OpenClaw's runtime: `node e2e/node24.mjs <node args...>` installs the pinned
// OpenClaw (+ a Node it accepts) if missing, then runs that Node with the given arguments and
// OPENCLAW_PACKAGE_DIR pointing at the installed openclaw package (the tests import OpenClaw's
// own hook runner and CLI from there). Exits with the child's status.
import { spawnSync } from 'node:child_process';
import { ensureOpenClawRuntime } from './setup-openclaw.mjs';

let runtime;
try {
  runtime = ensureOpenClawRuntime({ quiet: true });
} catch (error) {
  process.stderr.write(`node24: ${error.message}\n`);
  process.exit(1);
}
const r = spawnSync(runtime.nodeBin, process.argv.slice(2), {
  stdio: 'inherit',
  env: { ...process.env, OPENCLAW_PACKAGE_DIR: runtime.openclawDir, OPENCLAW_NODE_BIN: runtime.nodeBin, OPENCLAW_ENTRY: runtime.openclawEntry },
});
process.exit(r.status ?? 1);
