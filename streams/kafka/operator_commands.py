"""Publishing operators' releases and aborts (issue 43) on the events topic, each under its
run's key (its session id when known, else its run id), so the worker applies it among the
run's events. Shared by ``loopguard release`` and the web UI's endpoints."""

from __future__ import annotations

import getpass
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from streams.core.events import Envelope, partition_key
from streams.core.operator_command import OperatorCommand
from streams.settings import Settings
from streams.wire.operator_codec import encode_command
from streams.wire.signing import operator_headers

CLIENT_ID = "loopguard-release"


def operator_name() -> str:
    """Who runs this process (the default for ``--by``)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return str(os.getuid())


def new_release_id() -> str:
    return uuid.uuid4().hex


def build_command(
    run_id: str,
    agent_id: str,
    command: str,
    *,
    release_id: str,
    reason: str,
    released_by: str,
    calls: int | None = None,
    until: int | None = None,
    session_id: str | None = None,
    scope: str = "run",
    source: str = "cli",
    now_ms: int | None = None,
) -> OperatorCommand:
    """One run's command, timed now (its event time)."""
    at = int(time.time() * 1000) if now_ms is None else now_ms
    envelope = Envelope(run_id, agent_id, "", 0, at, session_id or None)
    return OperatorCommand(
        envelope, command, release_id, calls, until, reason, released_by, scope, source
    )


def send_commands(
    settings: Settings, commands: Sequence[OperatorCommand], timeout_s: float = 30.0
) -> list[Any]:
    """Publish ``commands`` (acknowledged by every in-sync replica); their record metadata."""
    from kafka import KafkaProducer  # deferred: kafka-python takes most of a second to import

    producer = KafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        client_id=CLIENT_ID,
        **settings.kafka_client_options(),
    )
    try:
        futures = []
        for command in commands:
            value = encode_command(command)
            futures.append(
                producer.send(
                    settings.topics.events,
                    key=partition_key(command.envelope).encode(),
                    value=value,
                    # with the workers' keys file at hand: an operator key's signature (issue 40)
                    headers=operator_headers(settings.gateway_keys, value),
                )
            )
        return [future.get(timeout=timeout_s) for future in futures]
    finally:
        producer.close()
