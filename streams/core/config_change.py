"""One change of the guard's config, and who sent it as far as Kafka can tell.

Every config change is kept (issue 26): a record on the config topic (``loopguard config set``
or any other producer), and the worker's config file at start. The sender is what the record's
headers declare (:data:`SENDER_HEADERS`, attached by the ``loopguard`` CLI): headers are
self-declared, anyone who may write the topic may write any header, which is why the broker's
ACLs decide who may write ``PREFIX.config`` at all (docs/operations.md).

Pure data: the Kafka follower builds these, the audit trail stores them, webhooks post the
ones that turn guarding off for the whole fleet or weaken it (issue 40).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from streams.core.config import LoopDetectionConfig

# Record headers a config producer attaches (values UTF-8). The principal is the SASL user the
# producer authenticated as; the rest describe the process that sent the record.
PRINCIPAL_HEADER = "loopguard-principal"
CLIENT_ID_HEADER = "loopguard-client-id"
USER_HEADER = "loopguard-user"
HOST_HEADER = "loopguard-host"
SOURCE_HEADER = "loopguard-source"
SENDER_HEADERS = (PRINCIPAL_HEADER, CLIENT_ID_HEADER, USER_HEADER, HOST_HEADER, SOURCE_HEADER)
HEADER_LIMIT = 256  # characters kept of each header value

# Where a change came from.
SOURCE_TOPIC = "topic"  # a config record without our headers (some other producer)
SOURCE_CLI = "cli"  # a config record sent by `loopguard config`
SOURCE_FILE = "file"  # the worker's --config file
# What it did.
SET, REMOVED, REFUSED, LOADED = "set", "removed", "refused", "loaded"
FILE_KEY = "(file)"  # the agent_key of a config file change


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A change with its value, the config versions around it and its sender.

    ``change_id`` makes storing idempotent: ``topic:partition:offset`` for a record (a
    replay is the same change), the file's version transition for a file."""

    change_id: str
    source: str
    action: str
    agent_key: str
    value: str | None  # the JSON block (or file document); None for a removal
    changed_at: int  # epoch ms: the record's timestamp, or when the file was loaded
    version_before: str = ""
    version_after: str = ""
    error: str = ""  # why workers refused the record (action "refused")
    disables: bool = False  # turns guarding off, or to observe only, for every agent ("*")
    # issue 40: the canonical loops the change no longer stops, judged by its effect
    # (streams.core.config_canary); "" when it weakens nothing they show
    weakened: str = ""
    principal: str = ""
    client_id: str = ""
    sender_user: str = ""
    sender_host: str = ""
    topic: str = ""
    partition: int | None = None
    offset: int | None = None
    recorded_by: str = ""  # the worker that recorded it (its host name)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def sender(self) -> str:
        """Who sent it, in one phrase: principal, user@host, client id (what is known)."""
        parts = []
        if self.principal:
            parts.append(self.principal)
        if self.sender_user or self.sender_host:
            parts.append(f"{self.sender_user or '?'}@{self.sender_host or '?'}")
        if self.client_id:
            parts.append(f"client {self.client_id}")
        return ", ".join(parts) or "unknown sender (no loopguard headers)"


def decode_headers(headers: Any) -> dict[str, str]:
    """The sender headers of a record (kafka-python's list of (name, bytes)), decoded and
    clipped; other headers and repeats after the first are ignored."""
    found: dict[str, str] = {}
    for name, raw in headers or ():
        if name in SENDER_HEADERS and name not in found and raw is not None:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            found[name] = text[:HEADER_LIMIT]
    return found


WEAKENED_LABEL = "GUARDING WEAKENED"  # how `config history` and the log name a weakening


def alarming(change: ConfigChange) -> bool:
    """A change operators must hear of: guarding off or observe-only for every agent, or
    weakened for a key (webhook, WARNING)."""
    return change.disables or bool(change.weakened)


def turns_guarding_off(config: LoopDetectionConfig) -> bool:
    """Guarding off (``enabled: false``) or only observing (``mode: "observe"``)."""
    return config.enabled is False or not config.enforced
