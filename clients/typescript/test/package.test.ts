import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, it } from 'node:test';

/** The package's folder (this file runs from build/test/). */
const ROOT = resolve(__dirname, '..', '..');

describe('the published package', () => {
  const manifest = JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8'));

  it('is publishable: not private, public under its scope, built before packing', () => {
    assert.equal(manifest.name, '@loopguard/client');
    assert.equal(manifest.private, undefined);
    assert.equal(manifest.publishConfig?.access, 'public');
    assert.equal(manifest.scripts.prepack, 'npm run build');
    assert.deepEqual(Object.keys(manifest.dependencies).sort(), ['avsc', 'kafkajs']);
  });

  it('packs the built code, its types, the schemas and the README, and no sources or tests', () => {
    // After `npm test`'s build: --ignore-scripts packs what is there instead of building again.
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, encoding: 'utf8' });
    const [packed] = JSON.parse(out) as { files: { path: string }[] }[];
    const paths = new Set(packed.files.map((f) => f.path));
    for (const path of [manifest.main, manifest.types, 'dist/brokers.js', 'schemas/AgentEvent.avsc', 'schemas/Decision.avsc', 'README.md']) {
      assert.ok(paths.has(path), `${path} is not in the package`);
    }
    const stray = [...paths].filter((p) => /^(src|test|build|scripts|node_modules)\//.test(p));
    assert.deepEqual(stray, []);
  });
});
