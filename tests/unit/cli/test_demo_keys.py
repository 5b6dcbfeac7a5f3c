"""The demo's keys file (issue 40 with issue 43): its gateway signs events, and its operator
key lets ``loopguard release`` and ``abort`` through a worker that requires signatures."""

from __future__ import annotations

from pathlib import Path

from streams.devtools.demo import DEMO_GATEWAY, write_demo_keys
from streams.wire.signing import GatewayKeys, KeyRing, operator_headers


def test_the_demo_keys_file_signs_its_gateway_and_its_operator(tmp_path: Path) -> None:
    path = tmp_path / "gateway-keys.json"
    gateway_key = write_demo_keys(path)
    assert path.stat().st_mode & 0o777 == 0o600
    keys = GatewayKeys.load(str(path))
    value = b"an event or a command"
    assert keys.check(DEMO_GATEWAY, KeyRing.of(gateway_key).headers(value), value) == ""
    # loopguard release, run with LOOPGUARD_GATEWAY_KEYS naming the file, signs its command
    # with the operator key, which the worker takes for any run; the gateway's key is not one
    headers = operator_headers(str(path), value)
    assert headers is not None and keys.check_command(headers, value) == ""
    assert keys.check_command(KeyRing.of(gateway_key).headers(value), value) != ""
    assert write_demo_keys(path) != gateway_key  # a fresh key each demo
