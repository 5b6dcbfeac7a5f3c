#!/usr/bin/env node
// Installs the pinned real OpenClaw (from the npm registry, with npm) into a scratch runtime
// directory for the tests and the e2e harness, plus a Node.js that OpenClaw accepts when the
// current one is too old (OpenClaw 2026.9.x needs Node >=24.16 <25 or >=26.1; the machines here
// have Node 20, so the node-linux-<arch> package, which ships the official node binary, is
// installed next to it).
//
//   node e2e/setup-openclaw.mjs          # install if missing, print the runtime as JSON
//
// Install scripts are skipped (--ignore-scripts): openclaw's preinstall only checks the Node
// version of the npm running it, and nothing the harness uses needs the others.
//
// env: OPENCLAW_RUNTIME_DIR (default ~/.cache/loopguard-openclaw/runtime-<version>), OPENCLAW_VERSION (default the
// pinned one below), OPENCLAW_NODE (a node binary to use instead of installing one).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const OPENCLAW_VERSION = process.env.OPENCLAW_VERSION || '2026.9.6';
export const NODE_PACKAGE_VERSION = '24.22.3';

const here = path.dirname(fileURLToPath(import.meta.url));
export const PLUGIN_DIR = path.resolve(here, '..');
// Outside the plugin's root on purpose: OpenClaw fingerprints a plugin's source tree while it
// loads it ("Plugin source changed while preparing its reload") and writes into its own package
// on first start, so its installation must not live inside the plugin directory.
const cacheHome = process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
export const RUNTIME_DIR = path.resolve(process.env.OPENCLAW_RUNTIME_DIR || path.join(cacheHome, 'loopguard-openclaw', `runtime-${OPENCLAW_VERSION}`));

function nodeAccepted(version) {
  const [major, minor] = version.replace(/^v/, '').split('.').map(Number);
  return (major === 24 && minor >= 16) || (major === 26 && minor >= 1) || major > 26;
}

function nodeVersionOf(bin) {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

function nodePackageName() {
  const arch = { x64: 'x64', arm64: 'arm64' }[process.arch];
  if (process.platform !== 'linux' || !arch) return undefined;
  return `node-linux-${arch}`;
}

/** Where things are (without installing). */
export function runtimePaths() {
  const openclawDir = path.join(RUNTIME_DIR, 'node_modules', 'openclaw');
  const pkg = nodePackageName();
  let nodeBin = process.env.OPENCLAW_NODE;
  if (!nodeBin && nodeAccepted(process.version)) nodeBin = process.execPath;
  if (!nodeBin && pkg) nodeBin = path.join(RUNTIME_DIR, 'node_modules', pkg, 'bin', 'node');
  return { runtimeDir: RUNTIME_DIR, openclawDir, openclawEntry: path.join(openclawDir, 'openclaw.mjs'), nodeBin };
}

function installedVersion(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
  } catch {
    return undefined;
  }
}

/** Install what is missing; returns runtimePaths(). Throws with a readable message on failure. */
export function ensureOpenClawRuntime({ quiet = false } = {}) {
  const paths = runtimePaths();
  const deps = {};
  if (installedVersion(paths.openclawDir) !== OPENCLAW_VERSION) deps.openclaw = OPENCLAW_VERSION;
  const needNodePkg = !process.env.OPENCLAW_NODE && !nodeAccepted(process.version);
  if (needNodePkg) {
    const pkg = nodePackageName();
    if (!pkg) throw new Error(`OpenClaw needs Node >=24.16; this is ${process.version} on ${process.platform}/${process.arch}: set OPENCLAW_NODE`);
    if (!paths.nodeBin || !fs.existsSync(paths.nodeBin) || nodeVersionOf(paths.nodeBin) !== `v${NODE_PACKAGE_VERSION}`) {
      deps[pkg] = NODE_PACKAGE_VERSION;
    }
  }
  if (Object.keys(deps).length > 0) {
    fs.mkdirSync(RUNTIME_DIR, { recursive: true });
    const manifest = path.join(RUNTIME_DIR, 'package.json');
    let current = { name: 'loopguard-openclaw-runtime', private: true, dependencies: {} };
    try {
      current = JSON.parse(fs.readFileSync(manifest, 'utf8'));
    } catch {
      // first install
    }
    current.dependencies = { ...(current.dependencies || {}), ...deps };
    fs.writeFileSync(manifest, JSON.stringify(current, null, 2) + '\n');
    if (!quiet) process.stderr.write(`setup-openclaw: installing ${Object.entries(deps).map(([k, v]) => `${k}@${v}`).join(' ')} into ${RUNTIME_DIR}\n`);
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const r = spawnSync(npm, ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], {
      cwd: RUNTIME_DIR,
      // npm's own output goes to stderr: stdout carries only this script's JSON answer.
      stdio: quiet ? ['ignore', 'ignore', 'inherit'] : ['ignore', 2, 'inherit'],
    });
    if (r.status !== 0) throw new Error(`npm install in ${RUNTIME_DIR} failed (exit ${r.status})`);
  }
  const done = runtimePaths();
  if (!fs.existsSync(done.openclawEntry)) throw new Error(`OpenClaw is not installed at ${done.openclawDir}`);
  const v = done.nodeBin && nodeVersionOf(done.nodeBin);
  if (!v || !nodeAccepted(v)) throw new Error(`no Node >=24.16 for OpenClaw (got ${v ?? 'none'} from ${done.nodeBin})`);
  return { ...done, nodeVersion: v, openclawVersion: installedVersion(done.openclawDir) };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    process.stdout.write(JSON.stringify(ensureOpenClawRuntime(), null, 2) + '\n');
  } catch (error) {
    process.stderr.write(`setup-openclaw: ${error.message}\n`);
    process.exit(1);
  }
}
