"""Reaching the broker: the addresses a gateway is given, and the one error it raises when
loopguard cannot be reached within its connect budget.

Addresses come as users have them: ``host:port``, or ``kafka://host:port`` as workers'
``LOOPGUARD_BROKER`` and ``loopguard demo`` spell them, several separated by commas or
semicolons (or given as a list); a missing port is Kafka's 9092. A malformed one is refused
in one line before anything connects.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

DEFAULT_PORT = 9092
SCHEME = "kafka"
FORMS = "write host:port or kafka://host:port"


class BrokerAddressError(ValueError):
    """A broker address that is not ``host:port`` or ``kafka://host:port``."""


class GatewayConnectError(RuntimeError):
    """loopguard could not be reached within the connect budget: no broker answered, or the
    broker has no loopguard topics (no worker ever ran with this topic prefix). One line."""


def parse_brokers(addresses: str | Sequence[str]) -> list[str]:
    """``host:port`` for each address, in order; raises :class:`BrokerAddressError`."""
    items = [addresses] if isinstance(addresses, str) else list(addresses)
    servers = []
    for item in items:
        if not isinstance(item, str):
            raise BrokerAddressError(f"broker address {item!r} is not text ({FORMS})")
        parts = (part.strip() for part in item.replace(";", ",").split(","))
        servers += [host_port(part) for part in parts if part]
    if not servers:
        raise BrokerAddressError(f"no broker address given ({FORMS})")
    return servers


def host_port(address: str) -> str:
    """One address as ``host:port`` (an IPv6 host in brackets)."""
    # An address with a user name may hold a password: never echoed.
    named = f"broker address {address!r}" if "@" not in address else "a broker address"
    rest = address
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme.lower() != SCHEME:
            raise BrokerAddressError(f"{named}: {scheme}:// is not kafka:// ({FORMS})")
    try:
        parts = urlsplit(f"//{rest}")
        port = parts.port
    except ValueError:  # a port that is no number or out of range, an unclosed IPv6 bracket
        parts, port = urlsplit("//"), 0
        if rest.count("[") != rest.count("]"):
            raise BrokerAddressError(f"{named} is not a host and port ({FORMS})") from None
    if "@" in parts.netloc:
        raise BrokerAddressError(f"{named}: pass credentials as Kafka options ({FORMS})")
    if port == 0 or parts.netloc.endswith(":"):
        raise BrokerAddressError(f"{named}: the port must be a number from 1 to 65535 ({FORMS})")
    if parts.path or parts.query or parts.fragment or not parts.hostname:
        raise BrokerAddressError(f"{named} is not a host and port ({FORMS})")
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port or DEFAULT_PORT}"
