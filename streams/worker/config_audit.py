"""The worker's part in keeping the control plane accountable (issue 26).

Every config record the worker's config follower sees, and the worker's config file at start,
go to the audit trail (``config_changes``) through the audit writer, from a thread of their own:
the follower thread only queues them, so a database that is down delays the record and never
the config. A change that turns guarding off or to observe only for every agent, or that
weakens guarding by its effect (issue 40, streams.core.config_canary), is posted to the
webhooks once (by the worker that stored it first; the outbox keys it by its record).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from streams.audit.config_changes import ConfigChangeRecorder, record_change, record_file_change
from streams.audit.store import AuditStore
from streams.audit.writer import AuditWriter
from streams.core.config import resolve
from streams.core.config_change import FILE_KEY, LOADED, SOURCE_FILE, ConfigChange, alarming
from streams.core.fleet import FleetConfig
from streams.kafka.config_topic import ConfigWatcher
from streams.webhooks.notifier import WebhookNotifier

WAIT_SLICE_S = 5.0  # the audit writer waits out an outage; the recorder checks in this often


def file_change(fleet: FleetConfig, path: str, app_id: str, now_ms: int) -> ConfigChange:
    """The worker's config file as a change: its whole document, and as its version the
    config version of its global block, the one the decisions of agents without a block of
    their own carry and ``config check`` shows for ``tools.loopDetection`` (issue 41: it was
    a hash of the document, a third version for the same config). The version before is the
    one stored last for the same app and path."""
    document = json.dumps(fleet.to_document(), sort_keys=True, separators=(",", ":"))
    version = resolve(fleet.global_block).version
    digest = hashlib.sha256(document.encode()).hexdigest()[:16]
    where = f"{app_id}:{path or '(built-in defaults)'}"
    return ConfigChange(
        change_id=f"file:{where}:{version}:{digest}",
        source=SOURCE_FILE,
        action=LOADED,
        agent_key=FILE_KEY,
        value=document,
        changed_at=now_ms,
        version_after=version,
        sender_host=socket.gethostname(),
        topic=where,
        recorded_by=socket.gethostname(),
    )


def _through(loop: asyncio.AbstractEventLoop, audit: AuditWriter) -> Callable[..., bool]:
    def write(change: ConfigChange) -> bool:
        work: Callable[[AuditStore, ConfigChange], bool] = (
            record_file_change if change.source == SOURCE_FILE else record_change
        )
        future: Future[bool] = asyncio.run_coroutine_threadsafe(
            audit.run("config change", lambda store: work(store, change)), loop
        )
        while True:  # the same write, however long the database is away: never a second one
            try:
                return future.result(timeout=WAIT_SLICE_S)
            except TimeoutError:
                if loop.is_closed():
                    raise RuntimeError(
                        "the worker stopped before the change was recorded"
                    ) from None

    return write


def start_config_audit(
    overrides: ConfigWatcher,
    audit: AuditWriter,
    webhooks: WebhookNotifier | None,
    fleet: FleetConfig,
    config_path: str,
    app_id: str,
) -> ConfigChangeRecorder:
    """Start recording (call it in the worker's event loop, before the follower starts)."""
    loop = asyncio.get_running_loop()

    def on_new(change: ConfigChange) -> None:
        if alarming(change) and webhooks is not None:
            asyncio.run_coroutine_threadsafe(webhooks.submit_config_change(change), loop)

    recorder = ConfigChangeRecorder(_through(loop, audit), on_new).start()
    overrides.on_change = recorder.submit
    recorder.submit(file_change(fleet, config_path, app_id, int(time.time() * 1000)))
    return recorder


__all__: list[Any] = ["file_change", "start_config_audit"]
