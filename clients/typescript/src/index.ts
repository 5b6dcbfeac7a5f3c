/**
 * @loopguard/client: the TypeScript gateway client of loopguard.
 *
 * Publishes an AI agent's tool-call events to Kafka (Avro single-object encoding, byte for byte
 * what the Python client writes) and obeys the warn/block/abort decisions loopguard's workers
 * publish on the control topic.
 */

export {
  GatewayClient,
  GatewayRun,
  RunAborted,
  LOOP_VETO_RESULT,
  GUARD_TIMEOUT_RESULT,
  topicsFor,
  type AfterToolOptions,
  type BeforeToolOptions,
  type ClientStats,
  type FailMode,
  type GatewayClientOptions,
  type OutRecord,
  type Topics,
  type Transport,
  type Verdict,
} from './client';
export { BrokerAddressError, DEFAULT_KAFKA_PORT, hostPort, parseBrokers } from './brokers';
export {
  DEFAULT_MAX_MESSAGE_SIZE,
  HEADER_SIZE,
  MARKER,
  NAME_MAX_BYTES,
  decisionIdOf,
  decodeControl,
  decodeDecision,
  decodeEvent,
  decodeWatermark,
  decodeWatermarks,
  encodeDecision,
  encodeEvent,
  encodeWatermark,
  encodeWatermarks,
  type ControlMessage,
  type DecodeOptions,
  type EncodeOptions,
  type EventEncodeOptions,
} from './codec';
export { MODEL_NOTE, modelNote, modelNotes } from './modelNotes';
export {
  ABORT_DETECTOR,
  RELEASE_DETECTOR,
  decodeOperatorCommand,
  encodeOperatorCommand,
  holdSettings,
  operatorAnswer,
  type HoldDefault,
  type HoldSettings,
  type OperatorCommandInput,
} from './hold';
export { ControlReader, type ControlRecord, type ControlReaderOptions } from './controlReader';
export { crc64Avro, crc64AvroBytes } from './crc64';
export {
  KEY_HEADER,
  KeyRing,
  KeysError,
  SIGNATURE_HEADER,
  keysFromEnv,
  signature,
  type CheckResult,
  type RecordHeaders,
} from './signing';
export * from './errors';
export { type Logger, defaultLogger } from './logger';
export { pyFloatRepr, pyJsonDumps, type PyJsonOptions } from './pyjson';
export {
  SCHEMA_NAMES,
  SchemaRegistry,
  defaultRegistry,
  eventSchemaJson,
  fingerprints,
  ownSchemas,
  parseSchemaText,
  parsingCanonicalForm,
  schemaDir,
  schemaFingerprint,
  type ParsedSchema,
  type SchemaName,
} from './schemas';
export * from './types';
