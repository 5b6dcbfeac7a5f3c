"""Write clients/vectors/signing.json: signed records both gateway clients must verify (issue 40).

Each case is a record's value (hex, taken from python.json's events, decisions and watermark
batches: the bytes the codecs agree on), the headers it carries and what a gateway holding
``keys`` must answer (``""``: it verifies; else why not). The ``signed`` cases are what the
Python signer writes for ``keys``' first key: the TypeScript client must write the same headers.
Run: .venv/bin/python clients/vectors/make_signing_vectors.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from streams.wire.signing import KEY_HEADER, SIGNATURE_HEADER, KeyRing

HERE = Path(__file__).resolve().parent
KEYS = {"k2": "gateway-secret-0123456789", "k1": "older-secret-0123456789"}
OTHER = {"x1": "someone-elses-secret-0123"}


def headers_of(ring: KeyRing, value: bytes) -> dict[str, str]:
    return {name: raw.decode() for name, raw in ring.headers(value)}


def build() -> dict[str, Any]:
    python = json.loads((HERE / "python.json").read_text(encoding="utf-8"))
    values = [("event " + v["name"], v["hex"]) for v in python["events"][:3]]
    values += [("decision " + v["name"], v["hex"]) for v in python["decisions"][:2]]
    values += [("watermarks " + v["name"], v["hex"]) for v in python["watermark_batches"][:1]]
    ring, older = KeyRing.of(KEYS), KeyRing.of({"k1": KEYS["k1"]})
    cases = []
    for name, hex_value in values:
        value = bytes.fromhex(hex_value)
        signed = headers_of(ring, value)
        tampered = bytearray(value)
        tampered[-1] ^= 1
        cases += [
            {"name": f"{name}: signed", "hex": hex_value, "headers": signed, "check": ""},
            {
                "name": f"{name}: signed with the older key (rotation)",
                "hex": hex_value,
                "headers": headers_of(older, value),
                "check": "",
            },
            {
                "name": f"{name}: another gateway's key",
                "hex": hex_value,
                "headers": headers_of(KeyRing.of(OTHER), value),
                "check": "bad_signature",
            },
            {
                "name": f"{name}: value changed after signing",
                "hex": bytes(tampered).hex(),
                "headers": signed,
                "check": "bad_signature",
            },
            {
                "name": f"{name}: signature under a key id of ours, from another key",
                "hex": hex_value,
                "headers": {
                    KEY_HEADER: "k2",
                    SIGNATURE_HEADER: headers_of(older, value)[SIGNATURE_HEADER],
                },
                "check": "bad_signature",
            },
            {
                "name": f"{name}: unsigned",
                "hex": hex_value,
                "headers": {},
                "check": "unsigned_event",
            },
        ]
    return {
        "generator": "clients/vectors/make_signing_vectors.py",
        "headers": {"key": KEY_HEADER, "signature": SIGNATURE_HEADER},
        "keys": KEYS,
        "cases": cases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "signing.json")
    args = parser.parse_args()
    data = build()
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(data['cases'])} cases")


if __name__ == "__main__":
    main()
