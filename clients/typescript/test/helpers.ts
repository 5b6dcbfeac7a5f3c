/** Shared helpers for the tests and the vector writer. */

import * as fs from 'node:fs';
import * as path from 'node:path';

import type { AgentEvent, Decision, RunWatermark } from '../src';

/** clients/vectors, found from the package root (this file runs from build/test or test/). */
export function vectorsDir(): string {
  if (process.env.LOOPGUARD_VECTORS_DIR) return process.env.LOOPGUARD_VECTORS_DIR;
  let dir = __dirname;
  for (;;) {
    const candidate = path.join(dir, 'clients', 'vectors');
    if (fs.existsSync(candidate)) return candidate;
    const sibling = path.join(dir, 'vectors');
    if (fs.existsSync(path.join(sibling, 'make_python_vectors.py'))) return sibling;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('cannot find clients/vectors');
    dir = parent;
  }
}

/** A tagged Python JSON value (see make_python_vectors.py) as the JS value a client would hold. */
export type Tagged =
  | { null: null }
  | { bool: boolean }
  | { int: string }
  | { float: string }
  | { str: string }
  | { list: Tagged[] }
  | { dict: [string, Tagged][] };

export function untag(node: Tagged): unknown {
  if ('null' in node) return null;
  if ('bool' in node) return node.bool;
  if ('int' in node) {
    const n = BigInt(node.int);
    return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
  }
  if ('float' in node) {
    const text = node.float;
    if (text === 'nan') return NaN;
    if (text === 'inf') return Infinity;
    if (text === '-inf') return -Infinity;
    return Number(text);
  }
  if ('str' in node) return node.str;
  if ('list' in node) return node.list.map(untag);
  return Object.fromEntries(node.dict.map(([k, v]) => [k, untag(v)]));
}

const LONG_FIELDS = new Set(['seq', 'event_time', 'count', 'event_count']);
const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** Wire-named vector fields (longs as strings) -> camelCase values (longs as number/bigint). */
export function fromWire(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (LONG_FIELDS.has(key) && typeof value === 'string') {
      const n = BigInt(value);
      out[camel(key)] = n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
    } else {
      out[camel(key)] = value;
    }
  }
  return out;
}

/** camelCase values -> wire-named vector fields (longs as strings). */
export function toWire(value: AgentEvent | Decision | RunWatermark | Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    if (key === 'extraJson') continue;
    const name = snake(key);
    out[name] = LONG_FIELDS.has(name) && (typeof item === 'number' || typeof item === 'bigint') ? String(item) : item;
  }
  return out;
}

export interface PythonVectors {
  codec_module: string;
  fingerprints: Record<string, string>;
  canonical_forms: Record<string, string>;
  event_schema: { key: string; value: string };
  events: { name: string; fields: Record<string, unknown>; hex: string }[];
  decisions: { name: string; fields: Record<string, unknown>; extra_json: Record<string, string>; hex: string }[];
  decisions_unsafe_for_js: { name: string; hex: string }[];
  watermarks: { name: string; fields: Record<string, unknown>; hex: string }[];
  watermark_batches: { name: string; watermarks: Record<string, unknown>[]; hex: string }[];
  invalid: {
    name: string;
    decoder: 'decode_event' | 'decode_decision' | 'decode_watermark';
    hex: string;
    error: string;
    message: string;
  }[];
  gateway_json: { name: string; value: Tagged; python: string; ts_expected?: string; why?: string }[];
}

export function loadPythonVectors(): PythonVectors {
  return JSON.parse(fs.readFileSync(path.join(vectorsDir(), 'python.json'), 'utf8')) as PythonVectors;
}
