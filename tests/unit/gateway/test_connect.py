"""The gateway client's first call: broker addresses as users write them (``host:port``,
``kafka://host:port``), one clear error for a malformed one, and a constructor bounded by its
connect budget against a real closed port (nothing listens; no mock), with one line to show."""

from __future__ import annotations

import socket
import threading

import pytest

from streams.gateway.client import BrokerAddressError, GatewayClient, GatewayConnectError
from streams.gateway.connect import parse_brokers


def closed_port() -> int:
    """A loopback port nothing listens on: bound by the kernel, then closed again."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("given", "servers"),
    [
        ("127.0.0.1:9092", ["127.0.0.1:9092"]),
        ("kafka://127.0.0.1:41234", ["127.0.0.1:41234"]),
        ("KAFKA://k1:1;kafka://k2:2", ["k1:1", "k2:2"]),
        (["a:1", "kafka://b", "c:3,"], ["a:1", "b:9092", "c:3"]),
        ("[::1]:9093", ["[::1]:9093"]),
        ("Kafka-1.Example:9092", ["kafka-1.example:9092"]),
    ],
)
def test_addresses_as_users_write_them(given: str | list[str], servers: list[str]) -> None:
    assert parse_brokers(given) == servers


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("kafka://h:abc", "'kafka://h:abc': the port must be a number from 1 to 65535"),
        ("h:0", "'h:0': the port must be"),
        ("h:65536", "'h:65536': the port must be"),
        ("h:", "'h:': the port must be"),
        ("http://h:1", "http:// is not kafka://"),
        ("kafka://", "'kafka://' is not a host and port"),
        ("h:1/x", "'h:1/x' is not a host and port"),
        ("[::1", "'[::1' is not a host and port"),
        ("", "no broker address given"),
        ([], "no broker address given"),
        ([7], "broker address 7 is not text"),
    ],
)
def test_a_malformed_address_is_one_line_naming_it(given: object, says: str) -> None:
    with pytest.raises(BrokerAddressError) as raised:
        parse_brokers(given)  # type: ignore[arg-type]
    message = str(raised.value)
    assert says in message and "\n" not in message
    assert "host:port or kafka://host:port" in message


def test_a_password_in_an_address_is_never_shown() -> None:
    with pytest.raises(BrokerAddressError) as raised:
        parse_brokers("kafka://svc:s3cret@k1:9092")
    assert "s3cret" not in str(raised.value)


def test_the_client_refuses_a_malformed_address_before_connecting() -> None:
    with pytest.raises(BrokerAddressError, match="'kafka://127.0.0.1:notaport'"):
        GatewayClient("kafka://127.0.0.1:notaport", gateway_id="gw")
    assert issubclass(BrokerAddressError, ValueError)


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", "kafka://127.0.0.1:{port}"])
def test_no_broker_is_one_error_within_the_connect_budget(form: str) -> None:
    port = closed_port()
    threads = set(threading.enumerate())
    with pytest.raises(GatewayConnectError) as raised:
        GatewayClient(form.format(port=port), gateway_id="gw", connect_timeout_ms=1000)
    message = str(raised.value)
    assert message == (
        f"loopguard gateway: 127.0.0.1:{port}: no Kafka broker answered within 1 s; "
        "check the address and that Kafka is running there"
    )
    # raised from None: no kafka-python traceback chained under it
    assert raised.value.__suppress_context__ and raised.value.__cause__ is None
    assert set(threading.enumerate()) <= threads, "the client left its Kafka threads running"
