"""Who wrote a record: per-gateway HMAC-SHA256 keys, carried in Kafka record headers (issue 40).

A gateway signs each event it publishes with its own key; workers, which hold every gateway's
keys, refuse an event whose signature is missing or wrong, or which names a gateway other than
the key's. The worker signs each control record (a decision, a batch of watermarks) with the
key of the gateway the record is about, so only that gateway (and the workers) can tell it is
authentic, and no gateway can write a record another gateway would accept.

The signature covers the record's value bytes exactly as sent (the Avro single-object
message): no canonical form to agree on across languages, and the schema does not change.
Two headers: ``loopguard-key`` (the key id, UTF-8) and ``loopguard-sig`` (the HMAC-SHA256 of
the value, 64 lower-case hex digits). Several keys per gateway are accepted by id (rotation);
the first listed is the one a record is signed with.

The keys file (``LOOPGUARD_GATEWAY_KEYS``: a path, or the JSON itself)::

    {"gateways": {"gw-1": {"k2": "<secret>", "k1": "<older secret>"}, "gw-2": {...}},
     "operators": {"op1": "<secret>"}}

``operators`` signs what ``loopguard release`` and ``loopguard abort`` send (issue 43): with
keys set, a worker applies a command that verifies under them to any run, and one signed by a
gateway only to a run of that gateway's (its hold's ``holdDefault``: it could as well not obey),
so a gateway, which may write the events topic too, cannot abort or release another's run.

A gateway is given its own keys only (``LOOPGUARD_GATEWAY_KEY``: ``k2:<secret>``, several
separated by commas, the signing one first).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY_HEADER = "loopguard-key"
SIGNATURE_HEADER = "loopguard-sig"
MIN_SECRET_BYTES = 16  # shorter secrets are refused: they could be guessed
MAX_KEYS_FILE_BYTES = 4 * 1024 * 1024

# Why a record did not verify; also the dead letters' metric kinds.
UNSIGNED = "unsigned_event"
BAD_SIGNATURE = "bad_signature"
UNKNOWN_GATEWAY = "unknown_gateway"
FOREIGN_RUN = "foreign_run"
UNSIGNED_COMMAND = "unsigned_command"  # an operator's command without an operator's signature

Headers = Sequence[tuple[str, bytes]]


class KeysError(ValueError):
    """A keys file or key list that cannot be used; one line saying why (never a secret)."""


def signature(secret: bytes, value: bytes) -> str:
    """The hex HMAC-SHA256 of ``value`` under ``secret``."""
    return hmac.new(secret, value, hashlib.sha256).hexdigest()


def header_value(headers: Any, name: str) -> bytes | None:
    """The first header called ``name`` (kafka-python's and aiokafka's list of pairs, or a
    mapping), or None."""
    if not headers:
        return None
    pairs: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    for pair in pairs:
        try:
            key, raw = pair
        except (TypeError, ValueError):
            continue
        if key == name and isinstance(raw, bytes | bytearray):
            return bytes(raw)
    return None


@dataclass(frozen=True)
class KeyRing:
    """One gateway's keys, in order: records are signed with the first and accepted under
    any (key id -> secret)."""

    keys: tuple[tuple[str, bytes], ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeysError("a key ring needs at least one key")
        for key_id, secret in self.keys:
            check_key(key_id, secret)

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """``id:secret[,id:secret...]`` (``LOOPGUARD_GATEWAY_KEY``), the signing key first."""
        keys = []
        for item in text.split(","):
            key_id, sep, secret = item.strip().partition(":")
            if not sep:
                raise KeysError("a gateway key is written key-id:secret (several: comma separated)")
            keys.append((key_id.strip(), secret.strip().encode()))
        return cls(tuple(keys))

    @classmethod
    def of(cls, keys: KeyRing | Mapping[str, str | bytes] | str) -> KeyRing:
        """A ring from what a gateway is given: a ring, ``{id: secret}`` or ``id:secret``."""
        if isinstance(keys, KeyRing):
            return keys
        if isinstance(keys, str):
            return cls.parse(keys)
        pairs = ((k, v.encode() if isinstance(v, str) else bytes(v)) for k, v in keys.items())
        return cls(tuple(pairs))

    @property
    def key_id(self) -> str:
        return self.keys[0][0]

    def headers(self, value: bytes) -> list[tuple[str, bytes]]:
        """The signature headers for ``value`` under the first key."""
        key_id, secret = self.keys[0]
        return [
            (KEY_HEADER, key_id.encode()),
            (SIGNATURE_HEADER, signature(secret, value).encode()),
        ]

    def check(self, headers: Any, value: bytes) -> str:
        """ "" when ``value`` carries a valid signature under one of these keys, else why not
        (:data:`UNSIGNED` or :data:`BAD_SIGNATURE`)."""
        key_id = header_value(headers, KEY_HEADER)
        signed = header_value(headers, SIGNATURE_HEADER)
        if key_id is None or signed is None:
            return UNSIGNED
        wanted = key_id.decode("utf-8", "replace")
        for candidate, secret in self.keys:
            if candidate == wanted:
                if hmac.compare_digest(signature(secret, value).encode(), signed):
                    return ""
                return BAD_SIGNATURE
        return BAD_SIGNATURE

    def holds(self, headers: Any) -> bool:
        """Whether the record names one of these key ids (it may be meant for this gateway)."""
        key_id = header_value(headers, KEY_HEADER)
        return key_id is not None and any(k.encode() == key_id for k, _ in self.keys)


def check_key(key_id: str, secret: bytes) -> None:
    if not key_id or len(key_id) > 64 or not key_id.isprintable() or "," in key_id or ":" in key_id:
        raise KeysError(f"key id {key_id[:64]!r}: 1 to 64 printable characters, no ',' or ':'")
    if len(secret) < MIN_SECRET_BYTES:
        raise KeysError(f"key {key_id!r}: the secret must be at least {MIN_SECRET_BYTES} bytes")


@dataclass(frozen=True)
class GatewayKeys:
    """Every gateway's keys, as the workers hold them (gateway id -> its ring)."""

    rings: Mapping[str, KeyRing]
    operators: KeyRing | None = None  # who may send operator commands (issue 43)

    @classmethod
    def from_json(cls, data: Any) -> GatewayKeys:
        gateways = data.get("gateways") if isinstance(data, dict) else None
        if not isinstance(gateways, dict) or not gateways:
            raise KeysError('the keys file needs {"gateways": {"<gateway id>": {"<key id>": ...}}}')
        rings = {}
        for gateway_id, keys in gateways.items():
            if not isinstance(keys, dict) or not keys:
                raise KeysError(f"gateway {gateway_id!r}: give its keys as {{key id: secret}}")
            if not all(isinstance(secret, str) for secret in keys.values()):
                raise KeysError(f"gateway {gateway_id!r}: each secret is a string")
            rings[gateway_id] = KeyRing.of(keys)
        operators = data.get("operators")
        if operators is None:
            return cls(rings)
        if not isinstance(operators, dict) or not operators:
            raise KeysError('"operators": give their keys as {key id: secret}')
        if not all(isinstance(secret, str) for secret in operators.values()):
            raise KeysError('"operators": each secret is a string')
        return cls(rings, KeyRing.of(operators))

    @classmethod
    def load(cls, source: str) -> GatewayKeys:
        """From ``LOOPGUARD_GATEWAY_KEYS``: the JSON itself when it starts with ``{``, else
        the path of a file holding it."""
        text = source.strip()
        if not text.startswith("{"):
            path = Path(text)
            try:
                if path.stat().st_size > MAX_KEYS_FILE_BYTES:
                    raise KeysError(f"keys file {path}: over {MAX_KEYS_FILE_BYTES} bytes")
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise KeysError(f"keys file {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise KeysError(f"keys file: not JSON ({str(exc)[:120]})") from None
        return cls.from_json(data)

    def check(self, gateway_id: str, headers: Any, value: bytes) -> str:
        """ "" when ``value`` is signed with a key of ``gateway_id`` (the gateway an event's
        envelope or a control record names), else why not."""
        ring = self.rings.get(gateway_id)
        if ring is None:
            return UNKNOWN_GATEWAY
        return ring.check(headers, value)

    def check_command(self, headers: Any, value: bytes, owner: str = "") -> str:
        """ "" when an operator's command is signed with an operator key, or with a key of
        ``owner`` (the gateway that owns the command's run, given only for a command to that
        one run: a gateway may release or abort its own run, e.g. a held call's
        holdDefault), else why not."""
        if owner and not self.check(owner, headers, value):
            return ""
        if self.operators is None:
            return UNSIGNED_COMMAND
        refused = self.operators.check(headers, value)
        return UNSIGNED_COMMAND if refused == UNSIGNED else refused

    def headers_for(self, gateway_id: str, value: bytes) -> tuple[tuple[str, bytes], ...]:
        """A control record's signature headers: under ``gateway_id``'s signing key, none for
        a gateway without keys (no gateway that verifies will take it)."""
        ring = self.rings.get(gateway_id)
        return () if ring is None else tuple(ring.headers(value))


def operator_headers(keys_source: str, value: bytes) -> list[tuple[str, bytes]] | None:
    """The headers an operator's command goes out with: signed with the first operator key of
    the keys file ``keys_source`` (``LOOPGUARD_GATEWAY_KEYS``); None without one."""
    if not keys_source:
        return None
    operators = GatewayKeys.load(keys_source).operators
    return None if operators is None else operators.headers(value)


def gateway_keys_from_env(environ: Mapping[str, str] | None = None) -> KeyRing | None:
    """A gateway's own keys from ``LOOPGUARD_GATEWAY_KEY``, or None when unset."""
    text = (os.environ if environ is None else environ).get("LOOPGUARD_GATEWAY_KEY", "").strip()
    return KeyRing.parse(text) if text else None


def control_gateway(messages: Sequence[Any]) -> str | None:
    """The one gateway a decoded control record is about (a decision's, or every watermark's
    of a batch), or None when it names none or several (a signed record names one)."""
    gateways = {getattr(message, "gateway_id", None) for message in messages}
    if len(gateways) != 1:
        return None
    gateway = gateways.pop()
    return gateway if isinstance(gateway, str) else None


def check_control(keys: GatewayKeys, headers: Any, value: bytes, messages: Sequence[Any]) -> str:
    """ "" when a control record (``value``, decoded as ``messages``) is signed for the gateway
    it is about, else why not: only those a worker signed reach the audit trail."""
    gateway = control_gateway(messages)
    if gateway is None:
        return UNKNOWN_GATEWAY
    return keys.check(gateway, headers, value)
