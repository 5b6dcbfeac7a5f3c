/**
 * Codec errors, mirroring the Python codec's hierarchy (streams/codec_errors.py): every
 * encode/decode failure is a {@link CodecError}, so a caller can skip or dead-letter a message
 * with one `instanceof` check. Messages are one line.
 */

export class CodecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The message does not start with the single-object marker `C3 01`. */
export class BadMarkerError extends CodecError {}

/** The message ends inside the header or the datum. */
export class TruncatedMessageError extends CodecError {}

/** The message exceeds the size limit. */
export class PayloadTooLargeError extends CodecError {
  constructor(
    readonly size: number,
    readonly limit: number,
  ) {
    super(`message is ${size} bytes, over the ${limit}-byte limit`);
  }
}

/** The writer-schema fingerprint is not registered. */
export class UnknownSchemaError extends CodecError {
  constructor(readonly fingerprint: Buffer) {
    super(
      `unknown writer schema fingerprint ${fingerprint.toString('hex')}; ` +
        'register the writer schema before decoding its messages',
    );
  }
}

/** A schema handed to the registry is not valid Avro. */
export class InvalidSchemaError extends CodecError {}

/** The writer schema cannot be resolved onto the reader schema. */
export class SchemaMismatchError extends CodecError {}

/** The datum is malformed or holds values the schema (or the event model) rejects. */
export class InvalidDatumError extends CodecError {}

/** run_id is empty: the message cannot be partitioned or attributed to a run. */
export class MissingRunIdError extends InvalidDatumError {
  constructor(what = 'event') {
    super(`missing run_id: ${what} has an empty run_id`);
  }
}

/** A value cannot be encoded (wrong type, out-of-range number, non-JSON extra, ...). */
export class EncodeError extends CodecError {}

/** First line of an error's message, at most 200 characters (like Python's one_line). */
export function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message || error.name : String(error);
  const line = text.split('\n', 1)[0].trim();
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}
