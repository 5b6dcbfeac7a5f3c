/**
 * CRC-64-AVRO, the Avro spec's schema fingerprint ("Rabin" fingerprint): the same 64-bit value
 * Java's SchemaNormalization.parsingFingerprint64 and fastavro's fingerprint(..., "CRC-64-AVRO")
 * compute. The single-object header carries it little-endian.
 */

const EMPTY = 0xc15d213aa4d7a795n;
const MASK = 0xffffffffffffffffn;

const TABLE: bigint[] = (() => {
  const table: bigint[] = [];
  for (let i = 0; i < 256; i++) {
    let fp = BigInt(i);
    for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n) & MASK);
    table.push(fp);
  }
  return table;
})();

/** The 64-bit fingerprint of `data` (for a schema: the UTF-8 bytes of its canonical form). */
export function crc64Avro(data: Uint8Array): bigint {
  let fp = EMPTY;
  for (const byte of data) fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(byte)) & 0xffn)];
  return fp;
}

/** The 8 fingerprint bytes as the single-object header carries them (little-endian). */
export function crc64AvroBytes(data: Uint8Array): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(crc64Avro(data));
  return out;
}
