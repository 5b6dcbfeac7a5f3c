"""What the worker's agents share, built once by the composition root
(:func:`streams.worker.bootstrap.build_worker`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import faust

from streams.audit.writer import AuditWriter
from streams.core.fleet import FleetConfig
from streams.kafka.config_topic import ConfigWatcher
from streams.kafka.rekey import Rekeyer
from streams.kafka.schema_topic import SchemaTopic
from streams.observability.metrics import WorkerMetrics
from streams.service.processor import EventProcessor
from streams.settings import Settings
from streams.state.expiry import RunExpiry
from streams.webhooks.notifier import WebhookNotifier
from streams.wire.schema_registry import SchemaRegistry
from streams.wire.signing import GatewayKeys


@dataclass
class WorkerParts:
    """Everything the agents use; built once by :func:`streams.worker.bootstrap.build_worker`."""

    settings: Settings
    app: faust.App
    events_topic: Any
    control_topic: Any
    deadletter_topic: Any
    runs: Any  # the Faust table: run id (bytes) -> RunState
    sessions: Any  # the Faust table: session id (bytes) -> its latest run id (bytes)
    processor: EventProcessor
    registry: SchemaRegistry
    schema_topic: SchemaTopic
    overrides: ConfigWatcher
    audit: AuditWriter
    expiry: RunExpiry
    rekeyer: Rekeyer
    metrics: WorkerMetrics
    webhooks: WebhookNotifier | None = None  # block/abort notifications, when URLs are set
    keys: GatewayKeys | None = None  # every gateway's signing keys (issue 40), when set
    fleet: FleetConfig | None = None  # the --config file, recorded as a config change
    # Held while a batch is applied and published; exactly-once commits wait for it
    # (streams.worker.exactly_once).
    commit_barrier: asyncio.Lock = field(default_factory=asyncio.Lock)
