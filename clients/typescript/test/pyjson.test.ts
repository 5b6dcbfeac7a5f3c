import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { pyFloatRepr, pyJsonDumps } from '../src';

describe('pyJsonDumps', () => {
  it("uses Python's separators and escapes", () => {
    assert.equal(pyJsonDumps({ a: [1, 'x'], b: {} }), '{"a": [1, "x"], "b": {}}');
    assert.equal(pyJsonDumps({ a: [1, 'x'] }, { compact: true }), '{"a":[1,"x"]}');
    assert.equal(pyJsonDumps('é\u0001\n"\\\u2028🦀'), '"é\\u0001\\n\\"\\\\\u2028🦀"');
    assert.equal(pyJsonDumps('\ud800x\udfff'), '"\\ud800x\\udfff"');
  });

  it('follows JSON.stringify for JS-only values', () => {
    assert.equal(pyJsonDumps(undefined), 'null');
    assert.equal(pyJsonDumps({ a: undefined, b: () => 1, c: Symbol('s'), d: 1 }), '{"d": 1}');
    assert.equal(pyJsonDumps([undefined, () => 1]), '[null, null]');
    assert.equal(pyJsonDumps(new Date(0)), '"1970-01-01T00:00:00.000Z"');
    assert.equal(pyJsonDumps({ toJSON: () => ({ x: 1 }) }), '{"x": 1}');
    assert.equal(pyJsonDumps([new Number(1.5), new String('s'), new Boolean(false)]), '[1.5, "s", false]');
    assert.equal(pyJsonDumps(new Map([[1, 2]])), '{}');
    assert.equal(pyJsonDumps(12345678901234567890n), '12345678901234567890');
  });

  it('writes numbers as Python would', () => {
    assert.equal(pyJsonDumps([NaN, Infinity, -Infinity]), '[NaN, Infinity, -Infinity]');
    assert.throws(() => pyJsonDumps(NaN, { allowNan: false }), RangeError);
    assert.equal(pyJsonDumps([1, -0, 0.5, 1e-7, 1e21, 2 ** 60]), '[1, 0, 0.5, 1e-07, 1e+21, 1152921504606846976]');
    assert.equal(pyFloatRepr(1e16), '1e+16');
    assert.equal(pyFloatRepr(123.0), '123.0');
    assert.equal(pyFloatRepr(0.0001), '0.0001');
    assert.equal(pyFloatRepr(-1.5e-300), '-1.5e-300');
  });

  it('refuses circular values', () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    assert.throws(() => pyJsonDumps(a), TypeError);
    const shared = { x: 1 };
    assert.equal(pyJsonDumps([shared, shared]), '[{"x": 1}, {"x": 1}]');
  });
});
