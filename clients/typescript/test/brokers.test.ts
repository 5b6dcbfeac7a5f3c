import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';

import { BrokerAddressError, GatewayClient, parseBrokers } from '../src';

/** A port nothing listens on: bound by the OS, then closed again. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  assert.ok(address && typeof address === 'object');
  return address.port;
}

const quiet = { warn: () => undefined, error: () => undefined };

describe('broker addresses', () => {
  it('takes host:port and kafka://host:port, lists and separated strings; 9092 by default', () => {
    assert.deepEqual(parseBrokers('127.0.0.1:9092'), ['127.0.0.1:9092']);
    assert.deepEqual(parseBrokers('kafka://127.0.0.1:41234'), ['127.0.0.1:41234']);
    assert.deepEqual(parseBrokers('KAFKA://k1:1;kafka://k2:2'), ['k1:1', 'k2:2']);
    assert.deepEqual(parseBrokers(['a:1', 'kafka://b', 'c:3,']), ['a:1', 'b:9092', 'c:3']);
    assert.deepEqual(parseBrokers('[::1]:9093'), ['[::1]:9093']);
    assert.deepEqual(parseBrokers('Kafka-1.Example:9092'), ['kafka-1.example:9092']);
  });

  it('refuses a malformed address with one line naming it (a password never shown)', () => {
    const cases: [unknown, RegExp][] = [
      ['kafka://h:abc', /'kafka:\/\/h:abc': the port must be a number from 1 to 65535/],
      ['h:0', /'h:0': the port/],
      ['h:65536', /'h:65536': the port/],
      ['h:', /'h:': the port/],
      ['http://h:1', /http:\/\/ is not kafka:\/\//],
      ['kafka://', /'kafka:\/\/' is not a host and port/],
      ['h:1/x', /'h:1\/x'/],
      ['', /no broker address given/],
      [[], /no broker address given/],
      [undefined, /no broker address given/],
      [[7], /broker address 7 is not text/],
    ];
    for (const [input, message] of cases) {
      assert.throws(
        () => parseBrokers(input as string),
        (error: unknown) => error instanceof BrokerAddressError && message.test(error.message) && !error.message.includes('\n'),
        String(input),
      );
    }
    assert.throws(
      () => parseBrokers('kafka://svc:s3cret@k1:9092'),
      (error: unknown) => error instanceof BrokerAddressError && !error.message.includes('s3cret'),
    );
  });

  it('connect rejects a malformed address before connecting, with a BrokerAddressError', async () => {
    await assert.rejects(
      GatewayClient.connect({ brokers: ['kafka://127.0.0.1:notaport'], gatewayId: 'gw', logger: quiet }),
      (error: unknown) => error instanceof BrokerAddressError && /notaport/.test(error.message),
    );
  });

  it('connect to kafka://host:port with nothing listening rejects (no uncaught error)', async () => {
    const port = await closedPort();
    await assert.rejects(
      GatewayClient.connect({
        brokers: `kafka://127.0.0.1:${port}`,
        gatewayId: 'gw',
        logger: quiet,
        kafka: { retry: { retries: 0 }, connectionTimeout: 1000 },
      }),
      (error: unknown) => error instanceof Error && !(error instanceof BrokerAddressError) && error.message.includes(String(port)),
    );
  });
});
