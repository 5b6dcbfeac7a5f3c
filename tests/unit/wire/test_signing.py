"""Per-gateway signing keys (issue 40): what a key ring signs verifies, nothing else does."""

from __future__ import annotations

import json

import pytest

from streams.wire.signing import (
    BAD_SIGNATURE,
    KEY_HEADER,
    SIGNATURE_HEADER,
    UNKNOWN_GATEWAY,
    UNSIGNED,
    GatewayKeys,
    KeyRing,
    KeysError,
    check_control,
    gateway_keys_from_env,
    signature,
)

SECRET = "0123456789abcdef-gw-1"
OLD = "fedcba9876543210-gw-1-old"
OTHER = "0123456789abcdef-gw-2"
KEYS = {"gateways": {"gw-1": {"k2": SECRET, "k1": OLD}, "gw-2": {"k1": OTHER}}}


def test_a_signed_value_verifies_and_a_changed_one_does_not() -> None:
    ring = KeyRing.of({"k2": SECRET})
    headers = ring.headers(b"event bytes")
    assert headers[0] == (KEY_HEADER, b"k2")
    assert headers[1] == (SIGNATURE_HEADER, signature(SECRET.encode(), b"event bytes").encode())
    assert ring.check(headers, b"event bytes") == ""
    assert ring.check(headers, b"event bytez") == BAD_SIGNATURE
    assert ring.check([], b"event bytes") == UNSIGNED
    assert ring.check([(KEY_HEADER, b"k2")], b"event bytes") == UNSIGNED


def test_rotation_accepts_every_listed_key_and_signs_with_the_first() -> None:
    keys = GatewayKeys.from_json(KEYS)
    old_ring = KeyRing.of({"k1": OLD})  # a gateway not yet switched to k2
    value = b"a call"
    assert keys.check("gw-1", old_ring.headers(value), value) == ""
    assert dict(keys.headers_for("gw-1", value))[KEY_HEADER] == b"k2"
    # a key of another gateway never passes for this one, whatever the envelope says
    other = KeyRing.of({"k1": OTHER}).headers(value)
    assert keys.check("gw-1", other, value) == BAD_SIGNATURE
    assert keys.check("gw-9", other, value) == UNKNOWN_GATEWAY
    assert keys.headers_for("gw-9", value) == ()


def test_a_control_record_is_checked_against_the_gateway_it_names() -> None:
    from streams.wire.avro import RunWatermark

    keys = GatewayKeys.from_json(KEYS)
    mark = RunWatermark(run_id="r", agent_id="a", gateway_id="gw-1", seq=3, event_time=1)
    value = b"watermarks"
    signed = keys.headers_for("gw-1", value)
    assert check_control(keys, signed, value, [mark]) == ""
    foreign = RunWatermark(run_id="s", agent_id="a", gateway_id="gw-2", seq=3, event_time=1)
    assert check_control(keys, signed, value, [foreign]) == BAD_SIGNATURE
    assert check_control(keys, signed, value, [mark, foreign]) == UNKNOWN_GATEWAY


def test_the_keys_file_is_read_from_a_path_or_inline(tmp_path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(KEYS))
    assert set(GatewayKeys.load(str(path)).rings) == {"gw-1", "gw-2"}
    assert set(GatewayKeys.load(json.dumps(KEYS)).rings) == {"gw-1", "gw-2"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not JSON"),
        ('{"gw-1": {"k": "x"}}', '{"gateways"'),
        ('{"gateways": {"gw-1": {"k": "short"}}}', "at least 16 bytes"),
        ('{"gateways": {"gw-1": {"a:b": "0123456789abcdefg"}}}', "key id"),
        ('{"gateways": {"gw-1": []}}', "give its keys"),
        ("/nonexistent/keys.json", "keys file /nonexistent/keys.json"),
    ],
)
def test_a_keys_file_that_cannot_be_used_is_refused_in_one_line(text: str, said: str) -> None:
    with pytest.raises(KeysError) as raised:
        GatewayKeys.load(text)
    message = str(raised.value)
    assert said in message and "\n" not in message
    assert "0123456789abcdefg" not in message  # never a secret


def test_a_gateway_reads_its_own_keys_from_the_environment() -> None:
    assert gateway_keys_from_env({}) is None
    ring = gateway_keys_from_env({"LOOPGUARD_GATEWAY_KEY": f"k2:{SECRET}, k1:{OLD}"})
    assert ring is not None and ring.key_id == "k2"
    assert ring.check(KeyRing.of({"k1": OLD}).headers(b"v"), b"v") == ""
    with pytest.raises(KeysError):
        gateway_keys_from_env({"LOOPGUARD_GATEWAY_KEY": SECRET})  # no key id


def test_operator_keys_sign_commands_and_no_gateway_key_passes_for_one(tmp_path) -> None:
    from streams.wire.signing import UNSIGNED_COMMAND, operator_headers

    data = {**KEYS, "operators": {"op1": "operator-secret-0123456789"}}
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(data))
    keys = GatewayKeys.load(str(path))
    value = b"an operator's abort"
    headers = operator_headers(str(path), value)
    assert headers is not None and keys.check_command(headers, value) == ""
    gateway_signed = KeyRing.of({"k2": SECRET}).headers(value)
    assert keys.check_command(gateway_signed, value) == BAD_SIGNATURE
    # a gateway's own key passes for a command to a run of its own (the caller names the
    # run's owner), never for another gateway's run
    assert keys.check_command(gateway_signed, value, owner="gw-1") == ""
    assert keys.check_command(gateway_signed, value, owner="gw-2") == BAD_SIGNATURE
    assert keys.check_command([], value, owner="gw-1") == UNSIGNED_COMMAND
    assert keys.check_command([], value) == UNSIGNED_COMMAND
    assert GatewayKeys.from_json(KEYS).check_command(headers, value) == UNSIGNED_COMMAND
    assert operator_headers("", value) is None
    assert operator_headers(json.dumps(KEYS), value) is None  # no operator key to sign with
    with pytest.raises(KeysError, match="operators"):
        GatewayKeys.from_json({**KEYS, "operators": []})
