#!/usr/bin/env node
// prebuild: copy the repository's Avro schemas (../../schemas/*.avsc) into this package's
// schemas/ so the built package is self-contained. Outside the repository (an unpacked
// tarball) the copy already shipped is kept.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const pkgRoot = path.resolve(__dirname, '..');
const source = path.resolve(pkgRoot, '..', '..', 'schemas');
const target = path.join(pkgRoot, 'schemas');

if (!fs.existsSync(source)) {
  if (fs.existsSync(target)) process.exit(0);
  console.error(`copy-schemas: neither ${source} nor ${target} exists`);
  process.exit(1);
}
const names = fs.readdirSync(source).filter((name) => name.endsWith('.avsc')).sort();
if (names.length === 0) {
  console.error(`copy-schemas: no .avsc files in ${source}`);
  process.exit(1);
}
fs.rmSync(target, { recursive: true, force: true });
fs.mkdirSync(target);
for (const name of names) fs.copyFileSync(path.join(source, name), path.join(target, name));
// Earlier versions (schemas/previous): read by the registry, written for runs without usage.
const previousSource = path.join(source, 'previous');
if (fs.existsSync(previousSource)) {
  fs.mkdirSync(path.join(target, 'previous'));
  for (const name of fs.readdirSync(previousSource).filter((n) => n.endsWith('.avsc')).sort()) {
    fs.copyFileSync(path.join(previousSource, name), path.join(target, 'previous', name));
  }
}
// The operator's command (issue 43): a gateway that holds a blocked call publishes its hold default.
const internalSource = path.join(source, 'internal', 'OperatorCommand.avsc');
if (fs.existsSync(internalSource)) {
  fs.mkdirSync(path.join(target, 'internal'));
  fs.copyFileSync(internalSource, path.join(target, 'internal', 'OperatorCommand.avsc'));
}
console.log(`copy-schemas: ${names.join(', ')}`);
