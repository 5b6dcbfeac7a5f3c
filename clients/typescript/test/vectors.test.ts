/**
 * Byte compatibility with the Python codec: clients/vectors/python.json is written by
 * clients/vectors/make_python_vectors.py with the Python codec; every message must decode to
 * the same fields here and encode again to the same bytes.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  type AgentEventInput,
  type DecisionInput,
  type RunWatermark,
  SCHEMA_NAMES,
  decodeControl,
  decodeDecision,
  decodeEvent,
  decodeWatermark,
  decodeWatermarks,
  encodeDecision,
  encodeEvent,
  encodeWatermark,
  encodeWatermarks,
  eventSchemaJson,
  fingerprints,
  ownSchemas,
  pyJsonDumps,
} from '../src';
import { fromWire, loadPythonVectors, toWire, untag } from './helpers';

const vectors = loadPythonVectors();
const STALE = 'the schemas changed since python.json was written: run .venv/bin/python clients/vectors/make_python_vectors.py';

describe('schemas and fingerprints', () => {
  it('has the same fingerprints as the Python codec', () => {
    assert.deepEqual(
      Object.keys(vectors.fingerprints).sort(),
      [...SCHEMA_NAMES].sort(),
      'python.json covers every schema of this package',
    );
    const ours = fingerprints();
    for (const name of SCHEMA_NAMES) assert.equal(ours[name], vectors.fingerprints[name], `${name}: ${STALE}`);
  });

  it('has the same Parsing Canonical Form as fastavro', () => {
    for (const name of SCHEMA_NAMES) {
      assert.equal(ownSchemas()[name].canonicalForm, vectors.canonical_forms[name], `${name}: ${STALE}`);
    }
  });

  it("announces the writer schema exactly as Python's publish_schema", () => {
    assert.equal(ownSchemas().AgentEvent.fingerprint.toString('hex'), vectors.event_schema.key);
    assert.equal(eventSchemaJson(), vectors.event_schema.value);
  });
});

describe('events from Python', () => {
  for (const vector of vectors.events) {
    it(vector.name, () => {
      const bytes = Buffer.from(vector.hex, 'hex');
      const event = decodeEvent(bytes);
      assert.deepEqual(toWire(event), vector.fields);
      assert.ok(encodeEvent(event).equals(bytes), 'decoded event re-encodes byte for byte');
      const fromFields = fromWire(vector.fields) as unknown as AgentEventInput;
      assert.ok(encodeEvent(fromFields).equals(bytes), 'the same fields encode to the same bytes');
    });
  }
});

describe('decisions from Python', () => {
  for (const vector of vectors.decisions) {
    it(vector.name, () => {
      const bytes = Buffer.from(vector.hex, 'hex');
      const decision = decodeDecision(bytes);
      const { extra, ...fields } = vector.fields as { extra: Record<string, unknown> } & Record<string, unknown>;
      const { extra: gotExtra, ...gotFields } = toWire(decision) as { extra: Record<string, unknown> };
      assert.deepEqual(gotFields, fields);
      assert.deepEqual(decision.extraJson, vector.extra_json);
      for (const [key, text] of Object.entries(vector.extra_json)) assert.deepEqual(gotExtra[key], JSON.parse(text));
      assert.deepEqual(Object.keys(gotExtra), Object.keys(extra));
      assert.ok(encodeDecision(decision).equals(bytes), 'decoded decision re-encodes byte for byte');
      assert.equal(decodeControl(bytes).type, 'decision');
      // Re-serialising the parsed extra values gives Python's text too, except where JS
      // cannot tell a float 1.0 from 1.
      const { extraJson: _ignored, ...withoutTexts } = decision;
      const expectSame = Object.values(vector.extra_json).every((text) => pyJsonDumps(JSON.parse(text), { compact: true }) === text);
      assert.equal(encodeDecision(withoutTexts).equals(bytes), expectSame);
      const input = { ...fromWire(fields), extraJson: vector.extra_json } as unknown as DecisionInput;
      assert.ok(encodeDecision(input).equals(bytes), 'the same fields encode to the same bytes');
    });
  }

  for (const vector of vectors.decisions_unsafe_for_js) {
    it(`refuses ${vector.name} (a long beyond 2^53 in a decision)`, () => {
      assert.throws(() => decodeDecision(Buffer.from(vector.hex, 'hex')), { name: 'InvalidDatumError' });
    });
  }
});

describe('watermarks from Python', () => {
  for (const vector of vectors.watermarks) {
    it(vector.name, () => {
      const bytes = Buffer.from(vector.hex, 'hex');
      const watermark = decodeWatermark(bytes);
      assert.deepEqual(toWire(watermark), vector.fields);
      assert.ok(encodeWatermark(watermark).equals(bytes));
      assert.ok(encodeWatermark(fromWire(vector.fields) as unknown as RunWatermark).equals(bytes));
      const control = decodeControl(bytes);
      assert.equal(control.type, 'watermark');
    });
  }
});

describe('batched watermarks (RunWatermarks) from Python', () => {
  for (const vector of vectors.watermark_batches) {
    it(vector.name, () => {
      const bytes = Buffer.from(vector.hex, 'hex');
      const watermarks = decodeWatermarks(bytes);
      assert.deepEqual(watermarks.map(toWire), vector.watermarks);
      assert.ok(encodeWatermarks(watermarks).equals(bytes), 'decoded watermarks re-encode byte for byte');
      const fromFields = vector.watermarks.map((fields) => fromWire(fields) as unknown as RunWatermark);
      assert.ok(encodeWatermarks(fromFields).equals(bytes), 'the same fields encode to the same bytes');
      const control = decodeControl(bytes);
      assert.equal(control.type, 'watermarks');
      assert.deepEqual(control.type === 'watermarks' && control.watermarks, watermarks);
    });
  }
});

describe('messages Python refuses', () => {
  for (const vector of vectors.invalid) {
    it(`${vector.name}: ${vector.error}`, () => {
      const decode = { decode_event: decodeEvent, decode_decision: decodeDecision, decode_watermark: decodeWatermark }[vector.decoder];
      assert.throws(() => decode(Buffer.from(vector.hex, 'hex')), (error: Error) => {
        assert.equal(error.name, vector.error, `Python: ${vector.message}; here: ${error.message}`);
        return true;
      });
    });
  }
});

describe("JSON text as Python's json.dumps(value, ensure_ascii=False)", () => {
  for (const vector of vectors.gateway_json) {
    it(vector.name, () => {
      const text = pyJsonDumps(untag(vector.value));
      assert.equal(text, vector.ts_expected ?? vector.python, vector.why);
    });
  }
});
