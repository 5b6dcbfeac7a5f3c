/**
 * The project's Avro schemas (`schemas/*.avsc`, copied into this package at build time), their
 * fingerprints, and the fingerprint -> writer-schema registry. Mirrors the Python
 * `streams.schema_registry`.
 *
 * Fingerprint: CRC-64-AVRO of the schema's Parsing Canonical Form, exactly as the Python side
 * computes it with fastavro. The canonical form keeps only what matters for parsing: it drops
 * `doc`, `default`, `aliases` and `logicalType` (so `{"type": "long", "logicalType":
 * "timestamp-millis"}` becomes `"long"`), writes full names and orders the attributes
 * name, type, fields, symbols, items, values, size. avsc's `Type#schema()` (without
 * `exportAttrs`) produces that same text, since logical types are not registered here; the
 * vector tests check the text and the fingerprints against the Python codec's.
 *
 * Longs are read as JS numbers while they are safe integers and as `bigint` beyond that, and
 * accept either on write, so 64-bit values round-trip exactly.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as avro from 'avsc';

import { crc64AvroBytes } from './crc64';
import { InvalidSchemaError, SchemaMismatchError, UnknownSchemaError, oneLine } from './errors';
import { pyJsonDumps } from './pyjson';

/** RunWatermarks (issue 24): every run's watermark of a worker batch, one record per control partition. */
export const SCHEMA_NAMES = ['AgentEvent', 'Decision', 'DeadLetter', 'RunWatermark', 'RunWatermarks'] as const;
export type SchemaName = (typeof SCHEMA_NAMES)[number];

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const SAFE_MIN = BigInt(Number.MIN_SAFE_INTEGER);
const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);

/** Avro long: number while safe, bigint beyond; writes either. */
const LongType = avro.types.LongType.__with({
  fromBuffer: (buf: Buffer): number | bigint => {
    const n = buf.readBigInt64LE();
    return n >= SAFE_MIN && n <= SAFE_MAX ? Number(n) : n;
  },
  toBuffer: (n: number | bigint): Buffer => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(BigInt(n));
    return buf;
  },
  fromJSON: (n: number | bigint) => n,
  toJSON: (n: number | bigint) => Number(n),
  isValid: (n: unknown): boolean =>
    (typeof n === 'bigint' && n >= INT64_MIN && n <= INT64_MAX) || Number.isSafeInteger(n),
  compare: (a: number | bigint, b: number | bigint) => (a === b ? 0 : a < b ? -1 : 1),
});

export interface ParsedSchema {
  /** avsc type, logical types ignored (event_time stays epoch milliseconds). */
  readonly type: avro.Type;
  /** Record full name, e.g. `loopguard.AgentEvent`. */
  readonly fullname: string;
  /** Compact JSON of the schema as given (logical types and docs kept), as published. */
  readonly jsonText: string;
  /** Parsing Canonical Form. */
  readonly canonicalForm: string;
  /** 8-byte CRC-64-AVRO fingerprint of the canonical form, little-endian (wire order). */
  readonly fingerprint: Buffer;
}

function forSchema(schema: unknown): avro.Type {
  // A fresh registry each time: avsc records the named types it meets in it.
  // The registry covers `"long"`; the hook covers `{"type": "long", ...}` (e.g. timestamp-millis).
  return avro.Type.forSchema(schema as avro.Schema, {
    registry: { long: LongType },
    typeHook: (node: unknown) =>
      node !== null && typeof node === 'object' && (node as { type?: unknown }).type === 'long' ? LongType : undefined,
    wrapUnions: 'auto',
  } as Partial<avro.ForSchemaOptions>);
}

/** Parsing Canonical Form of a schema given as JSON text or a decoded JSON value. */
export function parsingCanonicalForm(schema: string | object): string {
  const value = typeof schema === 'string' ? JSON.parse(schema) : schema;
  return JSON.stringify(forSchema(value).schema());
}

/** CRC-64-AVRO fingerprint (8 bytes, little-endian) of the schema's canonical form. */
export function schemaFingerprint(schema: string | object): Buffer {
  return crc64AvroBytes(Buffer.from(parsingCanonicalForm(schema), 'utf8'));
}

/** Parse and fingerprint one schema; throws {@link InvalidSchemaError}. */
export function parseSchemaText(schemaJson: string): ParsedSchema {
  try {
    const data = JSON.parse(schemaJson);
    // Python: json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    const jsonText = pyJsonDumps(data, { compact: true });
    const type = forSchema(data);
    const canonicalForm = JSON.stringify(type.schema());
    const fingerprint = crc64AvroBytes(Buffer.from(canonicalForm, 'utf8'));
    const fullname = type.name ?? (type as { typeName?: string }).typeName ?? 'unknown';
    return { type, fullname, jsonText, canonicalForm, fingerprint };
  } catch (error) {
    throw new InvalidSchemaError(`invalid Avro schema: ${oneLine(error)}`);
  }
}

/** Where this package's copy of `schemas/*.avsc` is: `<package root>/schemas`. */
export function schemaDir(): string {
  const override = process.env.LOOPGUARD_SCHEMA_DIR;
  if (override) return override;
  let dir = __dirname;
  for (;;) {
    const candidate = path.join(dir, 'schemas');
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new InvalidSchemaError(
    `cannot find the schemas/ folder of @loopguard/client above ${__dirname} (run npm run build)`,
  );
}

let own: Record<SchemaName, ParsedSchema> | undefined;

/** The project's schemas, parsed, by name. */
export function ownSchemas(): Record<SchemaName, ParsedSchema> {
  if (own) return own;
  const dir = schemaDir();
  const out = {} as Record<SchemaName, ParsedSchema>;
  for (const name of SCHEMA_NAMES) {
    const file = path.join(dir, `${name}.avsc`);
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (error) {
      throw new InvalidSchemaError(`cannot read schema ${file}: ${oneLine(error)}`);
    }
    const schema = parseSchemaText(text);
    if (schema.type.typeName !== 'record') throw new InvalidSchemaError(`schema ${name} must be a record`);
    out[name] = schema;
  }
  own = out;
  return out;
}

let previous: Record<string, ParsedSchema> | undefined;

/** Earlier versions of the project's schemas (`schemas/previous/<name>.v<N>.avsc`), by file stem. */
export function previousSchemas(): Record<string, ParsedSchema> {
  if (previous) return previous;
  const dir = path.join(schemaDir(), 'previous');
  const out: Record<string, ParsedSchema> = {};
  const names = fs.existsSync(dir) ? fs.readdirSync(dir).filter((name) => name.endsWith('.avsc')).sort() : [];
  for (const name of names) {
    const file = path.join(dir, name);
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (error) {
      throw new InvalidSchemaError(`cannot read schema ${file}: ${oneLine(error)}`);
    }
    out[name.slice(0, -'.avsc'.length)] = parseSchemaText(text);
  }
  previous = out;
  return out;
}

/** Fingerprint (hex, wire byte order) of each of the project's schemas. */
export function fingerprints(): Record<SchemaName, string> {
  const out = {} as Record<SchemaName, string>;
  for (const [name, schema] of Object.entries(ownSchemas())) {
    out[name as SchemaName] = schema.fingerprint.toString('hex');
  }
  return out;
}

/** Our AgentEvent writer schema as compact JSON (what a gateway announces on the schemas topic). */
export function eventSchemaJson(): string {
  return ownSchemas().AgentEvent.jsonText;
}

/**
 * Fingerprint -> writer schema, plus the avsc resolver per (writer, reader) pair. Pre-loaded
 * with the project's schemas and their previous versions; {@link register} adds others (e.g. a newer worker's schema).
 */
export class SchemaRegistry {
  private readonly entries = new Map<string, ParsedSchema>();
  private readonly resolvers = new Map<string, avro.Resolver>();

  constructor(schemaTexts?: Iterable<string>) {
    if (schemaTexts === undefined) {
      for (const schema of [...Object.values(ownSchemas()), ...Object.values(previousSchemas())]) {
        const key = schema.fingerprint.toString('hex');
        if (!this.entries.has(key)) this.entries.set(key, schema);
      }
    } else {
      for (const text of schemaTexts) this.register(text);
    }
  }

  /** Add a writer schema; returns its fingerprint. Idempotent (the first text seen is kept). */
  register(schemaJson: string): Buffer {
    const schema = parseSchemaText(schemaJson);
    const key = schema.fingerprint.toString('hex');
    if (!this.entries.has(key)) this.entries.set(key, schema);
    return schema.fingerprint;
  }

  has(fingerprint: Buffer): boolean {
    return this.entries.has(fingerprint.toString('hex'));
  }

  get size(): number {
    return this.entries.size;
  }

  /** The registered writer schema for a fingerprint; throws {@link UnknownSchemaError}. */
  get(fingerprint: Buffer): ParsedSchema {
    const entry = this.entries.get(fingerprint.toString('hex'));
    if (!entry) throw new UnknownSchemaError(Buffer.from(fingerprint));
    return entry;
  }

  schemaJson(fingerprint: Buffer): string {
    return this.get(fingerprint).jsonText;
  }

  /** The writer schema and its resolver for messages to be read as `reader`. */
  resolverFor(fingerprint: Buffer, reader: ParsedSchema): { writer: ParsedSchema; resolver: avro.Resolver } {
    const writer = this.get(fingerprint);
    if (writer.fullname !== reader.fullname) {
      throw new SchemaMismatchError(
        `message was written with schema ${writer.fullname}, expected ${reader.fullname}`,
      );
    }
    const key = `${fingerprint.toString('hex')}:${reader.fingerprint.toString('hex')}`;
    let resolver = this.resolvers.get(key);
    if (!resolver) {
      try {
        resolver = reader.type.createResolver(writer.type);
      } catch (error) {
        throw new SchemaMismatchError(
          `cannot resolve writer schema ${fingerprint.toString('hex')} onto ${reader.fullname}: ${oneLine(error)}`,
        );
      }
      this.resolvers.set(key, resolver);
    }
    return { writer, resolver };
  }
}

let defaultRegistryInstance: SchemaRegistry | undefined;

/** Process-wide registry used when callers pass none. */
export function defaultRegistry(): SchemaRegistry {
  defaultRegistryInstance ??= new SchemaRegistry();
  return defaultRegistryInstance;
}
