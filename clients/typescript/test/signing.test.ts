/**
 * Signed records (issue 40): the TypeScript client answers clients/vectors/signing.json as the
 * Python key ring does (tests/unit/gateway/test_signing_vectors.py), signs its events, and obeys
 * only the control records a worker signed for it.
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import { KeyRing, KeysError, encodeDecision, keysFromEnv } from '../src';
import { decisionFor, makeClient, watermarkFor } from './fakes';
import { vectorsDir } from './helpers';

interface SigningVectors {
  keys: Record<string, string>;
  cases: { name: string; hex: string; headers: Record<string, string>; check: string }[];
}

const vectors = JSON.parse(fs.readFileSync(path.join(vectorsDir(), 'signing.json'), 'utf8')) as SigningVectors;
const MINE = { k1: 'gateway-ts-secret-0123456789' };
const OTHER = KeyRing.of({ k9: 'another-gateway-secret-0123' });

describe('signing vectors (shared with Python)', () => {
  const ring = KeyRing.of(vectors.keys);
  for (const vector of vectors.cases) {
    it(vector.name, () => {
      const value = Buffer.from(vector.hex, 'hex');
      assert.equal(ring.check(vector.headers, value), vector.check);
      if (vector.name.endsWith(': signed')) assert.deepEqual(ring.headers(value), vector.headers);
    });
  }
  it('reads kafkajs header values (Buffers, repeats) and refuses short secrets and bad ids', () => {
    const value = Buffer.from(vectors.cases[0].hex, 'hex');
    const signed = ring.headers(value);
    const asBuffers = Object.fromEntries(Object.entries(signed).map(([k, v]) => [k, [Buffer.from(v), Buffer.from('x')]]));
    assert.equal(ring.check(asBuffers, value), '');
    assert.throws(() => KeyRing.of({ k: 'short' }), KeysError);
    assert.throws(() => KeyRing.of('no-key-id-here-0123456789'), KeysError);
    assert.equal(keysFromEnv({}), undefined);
    assert.equal(keysFromEnv({ LOOPGUARD_GATEWAY_KEY: 'k3:0123456789abcdef0123, k1:fedcba98765432100123' })?.keyId, 'k3');
  });
});

describe('GatewayClient with signing keys', () => {
  it('signs every event it publishes with its first key', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0, signingKeys: MINE });
    const run = client.startRun({ agentId: 'agent', runId: 'run-s' });
    await run.beforeTool('exec', { command: 'ls' });
    await client.flush();
    const ring = KeyRing.of(MINE);
    assert.equal(transport.sent.length, 2);
    for (const sent of transport.sent) assert.equal(ring.check(sent.headers, sent.value), '');
  });

  it('without keys its events carry no headers', async () => {
    const { client, transport } = makeClient({ waitBudgetMs: 0, signingKeys: undefined });
    client.startRun({ agentId: 'agent', runId: 'run-u' });
    await client.flush();
    assert.equal(transport.sent[0].headers, undefined);
  });

  it('a forged observe-only copy or block never pre-empts the real block', async () => {
    const { client, logger } = makeClient({ waitBudgetMs: 0, signingKeys: MINE });
    const run = client.startRun({ agentId: 'agent', runId: 'run-f' });
    const real = decisionFor('run-f', 1, 'block', { detector: 'generic_repeat' });
    const shadow = encodeDecision({
      runId: 'run-f',
      agentId: 'agent',
      gatewayId: 'gw-ts',
      seq: 1,
      eventTime: 0,
      action: 'block',
      detector: 'generic_repeat',
      severity: 'critical',
      count: 1,
      toolName: 'exec',
      reason: 'forged',
      enforced: false,
    });
    client.ingestControl(shadow, 'forged'); // unsigned, the same decision id
    client.ingestControl(shadow, 'forged', OTHER.headers(shadow)); // another gateway's key
    client.ingestControl(watermarkFor('run-f', 99), 'forged'); // "everything processed"
    assert.equal(client.stats().forged, 3);
    assert.deepEqual(client.decisions('run-f'), []);
    assert.ok(logger.at('warn').some((line) => line.includes('no worker signed for this gateway')));
    client.ingestControl(real, 'real', KeyRing.of(MINE).headers(real));
    assert.equal(client.stats().duplicates, 0);
    const verdict = await run.beforeTool('exec', { command: 'ls' });
    assert.equal(verdict.allowed, false);
  });

  it("another gateway's records are other runs, not forgeries", () => {
    const { client } = makeClient({ waitBudgetMs: 0, signingKeys: MINE });
    const record = decisionFor('not-mine', 1, 'abort');
    client.ingestControl(record, 'theirs', OTHER.headers(record));
    assert.equal(client.stats().forged, 0);
    assert.equal(client.stats().otherRuns, 1);
  });
});
