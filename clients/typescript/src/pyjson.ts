/**
 * JSON text as Python's `json.dumps(value, ensure_ascii=False)` writes it, for JS values.
 *
 * The Python gateway client serialises tool arguments and results with
 * `json.dumps(args, ensure_ascii=False)`: separators `", "` and `": "`, non-ASCII characters
 * written as they are, control characters escaped (`\n`, `\t`, ... or `\u00XX`), integers as
 * digits, floats as `repr(float)` (`0.1`, `1e-05`, `1e+16`, `1.5`), and `NaN` / `Infinity` /
 * `-Infinity` for non-finite floats. Loop detection hashes these texts, so the TypeScript
 * client writes the same bytes for the same value.
 *
 * Which JS values are accepted, and what they become, follows `JSON.stringify` (a `toJSON()`
 * method is called, `Number`/`String`/`Boolean` wrapper objects are unwrapped, `undefined`,
 * functions and symbols are left out of objects and become `null` in arrays), with these
 * rules where JS and Python values differ:
 *
 * - a number with no fractional part below 1e21 in magnitude is taken for an int and written
 *   in digits (`1`, never `1.0`; `2**60` as `1152921504606846976`), as `JSON.stringify` also
 *   writes it: JS has a single number type, so a Python *float* with an integral value
 *   (`1.0`, `-0.0`, `1e+16`) is the one unavoidable difference; `-0` is written `0`;
 * - any other finite number is written as Python writes that float (`0.5`, `1e-07`,
 *   `1.5e+300`, `1e+21`); NaN and ±Infinity as `NaN`, `Infinity`, `-Infinity` (Python's
 *   default `allow_nan=True`) unless `allowNan` is false;
 * - a `bigint` is written as its digits (a Python int);
 * - `undefined` at the top level is `null` (Python's `None`);
 * - a lone UTF-16 surrogate in a string is escaped as `\udXXX` (as `JSON.stringify` does);
 *   Python would put it in the text raw and then fail to encode the event as UTF-8;
 * - object keys come in JS property order (integer-like keys first, ascending), which is
 *   not always the insertion order a Python dict keeps.
 */

export interface PyJsonOptions {
  /** Python's `separators=(",", ":")` instead of the default `(", ", ": ")`. */
  compact?: boolean;
  /** Python's `allow_nan` (default true): false throws on NaN and ±Infinity. */
  allowNan?: boolean;
}

export function pyJsonDumps(value: unknown, options: PyJsonOptions = {}): string {
  const itemSep = options.compact ? ',' : ', ';
  const keySep = options.compact ? ':' : ': ';
  const allowNan = options.allowNan ?? true;
  const stack: object[] = [];

  const serialise = (input: unknown, key: string, inArray: boolean): string | undefined => {
    let value = input;
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === 'function') value = toJSON.call(value, key);
    }
    if (value instanceof Number) value = Number(value);
    else if (value instanceof String) value = String(value);
    else if (value instanceof Boolean) value = value.valueOf();
    else if (typeof value === 'object' && value !== null && Object.prototype.toString.call(value) === '[object BigInt]') {
      value = (value as { valueOf(): bigint }).valueOf();
    }

    switch (typeof value) {
      case 'string':
        return quote(value);
      case 'number':
        return formatNumber(value, allowNan);
      case 'bigint':
        return value.toString();
      case 'boolean':
        return value ? 'true' : 'false';
      case 'undefined':
      case 'function':
      case 'symbol':
        return inArray ? 'null' : undefined;
      default:
        break;
    }
    if (value === null) return 'null';
    const obj = value as object;
    if (stack.includes(obj)) throw new TypeError('Circular reference detected');
    stack.push(obj);
    try {
      if (Array.isArray(obj)) {
        const items = obj.map((item, index) => serialise(item, String(index), true) as string);
        return `[${items.join(itemSep)}]`;
      }
      const parts: string[] = [];
      for (const name of Object.keys(obj)) {
        const text = serialise((obj as Record<string, unknown>)[name], name, false);
        if (text !== undefined) parts.push(`${quote(name)}${keySep}${text}`);
      }
      return `{${parts.join(itemSep)}}`;
    } finally {
      stack.pop();
    }
  };

  return serialise(value, '', false) ?? 'null';
}

// Python's ESCAPE_DCT for ensure_ascii=False: only '"', '\\' and C0 controls are escaped.
const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  '\\': '\\\\',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
};
// Characters to escape: C0 controls, quote, backslash, and (in `u` mode a surrogate pair is
// one code point, so only) lone surrogates.
const NEEDS_ESCAPE = /[\u0000-\u001f"\\\ud800-\udfff]/gu;
const NEEDS_ESCAPE_TEST = /[\u0000-\u001f"\\\ud800-\udfff]/;

function quote(text: string): string {
  if (!NEEDS_ESCAPE_TEST.test(text)) return `"${text}"`;
  return `"${text.replace(NEEDS_ESCAPE, (ch) => SHORT_ESCAPES[ch] ?? `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`)}"`;
}

function formatNumber(value: number, allowNan: boolean): string {
  if (!Number.isFinite(value)) {
    if (!allowNan) throw new RangeError(`Out of range float values are not JSON compliant: ${value}`);
    return Number.isNaN(value) ? 'NaN' : value > 0 ? 'Infinity' : '-Infinity';
  }
  if (Number.isInteger(value) && Math.abs(value) < 1e21) {
    // An int, as JSON.stringify would also write it in digits (exact digits of the double).
    return Object.is(value, -0) ? '0' : Number.isSafeInteger(value) ? String(value) : BigInt(value).toString();
  }
  return pyFloatRepr(value);
}

/** `repr(float)` in Python 3: shortest round-trip digits, exponent form below 1e-4 or from 1e16. */
export function pyFloatRepr(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Infinity) return 'inf';
  if (value === -Infinity) return '-inf';
  if (value === 0) return Object.is(value, -0) ? '-0.0' : '0.0';
  // toExponential() without digits gives the shortest digits that round-trip, like repr().
  const [mantissa, expText] = value.toExponential().split('e');
  const exp = Number(expText);
  const negative = mantissa.startsWith('-');
  const digits = mantissa.replace('-', '').replace('.', '');
  let out: string;
  if (exp < -4 || exp >= 16) {
    const frac = digits.length > 1 ? `.${digits.slice(1)}` : '';
    out = `${digits[0]}${frac}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  } else if (exp >= 0) {
    out =
      digits.length <= exp + 1
        ? `${digits}${'0'.repeat(exp + 1 - digits.length)}.0`
        : `${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
  } else {
    out = `0.${'0'.repeat(-exp - 1)}${digits}`;
  }
  return negative ? `-${out}` : out;
}
