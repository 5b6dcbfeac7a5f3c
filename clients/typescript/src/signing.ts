/**
 * A gateway's signing keys (issue 40), as Python's `streams/wire/signing.py`: each event goes out
 * with an HMAC-SHA256 of its value bytes under the gateway's key, in two record headers
 * (`loopguard-key`: the key id, `loopguard-sig`: 64 lower-case hex digits); only control records
 * a worker signed with one of this gateway's keys are obeyed. Several keys are accepted
 * (rotation); the first signs.
 */

import { createHmac, timingSafeEqual } from 'node:crypto';

export const KEY_HEADER = 'loopguard-key';
export const SIGNATURE_HEADER = 'loopguard-sig';
/** Shorter secrets are refused: they could be guessed. */
export const MIN_SECRET_BYTES = 16;

/** Why a record did not verify ('' when it did). */
export type CheckResult = '' | 'unsigned_event' | 'bad_signature';

/** Record headers as kafkajs hands them over (a repeated header is an array). */
export type RecordHeaders = Record<string, Buffer | string | (Buffer | string)[] | undefined>;

export class KeysError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeysError';
  }
}

/** The hex HMAC-SHA256 of `value` under `secret`. */
export function signature(secret: Buffer, value: Buffer): string {
  return createHmac('sha256', secret).update(value).digest('hex');
}

function first(headers: RecordHeaders | undefined, name: string): Buffer | undefined {
  const raw = headers?.[name];
  const one = Array.isArray(raw) ? raw[0] : raw;
  if (one === undefined) return undefined;
  return typeof one === 'string' ? Buffer.from(one, 'utf8') : one;
}

/** One gateway's keys, in order: records are signed with the first and accepted under any. */
export class KeyRing {
  readonly keys: ReadonlyArray<readonly [string, Buffer]>;

  constructor(keys: Array<[string, Buffer]>) {
    if (!keys.length) throw new KeysError('a key ring needs at least one key');
    for (const [id, secret] of keys) {
      if (!id || id.length > 64 || /[,:\x00-\x1f\x7f]/.test(id)) {
        throw new KeysError(`key id ${JSON.stringify(id.slice(0, 64))}: 1 to 64 printable characters, no ',' or ':'`);
      }
      if (secret.length < MIN_SECRET_BYTES) {
        throw new KeysError(`key ${JSON.stringify(id)}: the secret must be at least ${MIN_SECRET_BYTES} bytes`);
      }
    }
    this.keys = keys;
  }

  /** `id:secret[,id:secret...]` (LOOPGUARD_GATEWAY_KEY), the signing key first; or `{id: secret}`. */
  static of(keys: KeyRing | Record<string, string> | string): KeyRing {
    if (keys instanceof KeyRing) return keys;
    if (typeof keys === 'string') {
      return new KeyRing(
        keys.split(',').map((item) => {
          const at = item.indexOf(':');
          if (at < 0) throw new KeysError('a gateway key is written key-id:secret (several: comma separated)');
          return [item.slice(0, at).trim(), Buffer.from(item.slice(at + 1).trim(), 'utf8')];
        }),
      );
    }
    return new KeyRing(Object.entries(keys).map(([id, secret]) => [id, Buffer.from(secret, 'utf8')]));
  }

  get keyId(): string {
    return this.keys[0][0];
  }

  /** The signature headers for `value` under the first key. */
  headers(value: Buffer): Record<string, string> {
    const [id, secret] = this.keys[0];
    return { [KEY_HEADER]: id, [SIGNATURE_HEADER]: signature(secret, value) };
  }

  /** '' when `value` carries a valid signature under one of these keys, else why not. */
  check(headers: RecordHeaders | undefined, value: Buffer): CheckResult {
    const id = first(headers, KEY_HEADER);
    const signed = first(headers, SIGNATURE_HEADER);
    if (id === undefined || signed === undefined) return 'unsigned_event';
    const wanted = id.toString('utf8');
    const key = this.keys.find(([candidate]) => candidate === wanted);
    if (!key) return 'bad_signature';
    const expected = Buffer.from(signature(key[1], value), 'utf8');
    return expected.length === signed.length && timingSafeEqual(expected, signed) ? '' : 'bad_signature';
  }
}

/** A gateway's own keys from `LOOPGUARD_GATEWAY_KEY`, or undefined when unset. */
export function keysFromEnv(env: Record<string, string | undefined> = process.env): KeyRing | undefined {
  const text = (env.LOOPGUARD_GATEWAY_KEY ?? '').trim();
  return text ? KeyRing.of(text) : undefined;
}
