"""The composition root: :func:`build_worker` turns :class:`Settings` into a ready Faust app.

Nothing in the worker reads the environment, patches Faust or opens a connection at import;
it all happens here, once, in an order that matters: patches before the app exists, the
state codec before the table, topics and services before the agents that use them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from pathlib import Path
from typing import Any

import faust

from streams.audit.writer import AuditWriter
from streams.core.fleet import load_fleet_config
from streams.kafka.config_topic import ConfigWatcher
from streams.kafka.operator_commands import send_commands
from streams.kafka.rekey import Rekeyer
from streams.kafka.schema_topic import SchemaTopic
from streams.observability.metrics import WorkerMetrics
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor
from streams.settings import Settings
from streams.state.expiry import RunExpiry
from streams.web import register_views
from streams.web.access import WebAccess
from streams.web.health_views import register_health_views
from streams.webhooks.notifier import WebhookNotifier
from streams.wire.schema_registry import default_registry
from streams.wire.signing import GatewayKeys, KeysError
from streams.worker import state_codec
from streams.worker.agent_cycles import AgentCycles
from streams.worker.agents import WorkerAgents
from streams.worker.faust_layer import install as install_faust_patches
from streams.worker.fetch_backoff import FetchBackoff
from streams.worker.gc_tuning import tune_collector
from streams.worker.incidents import register_incidents
from streams.worker.parts import WorkerParts
from streams.worker.shutdown import worker_with_deadline
from streams.worker.startup import StartupError, check_faust_patches
from streams.worker.tables import RunsTable, stored_values

log = logging.getLogger("loopguard.worker")


def broker_credentials(settings: Settings) -> Any:
    """SASL and/or TLS from settings; passwords go to the client, never to the log."""
    ssl_context = None
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        ssl_context = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    if settings.sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=ssl_context,
        )
    if ssl_context is not None:
        return faust.SSLCredentials(ssl_context)
    return None


def apply_faust_patches(settings: Settings, commit_barrier: asyncio.Lock) -> None:
    """The Faust layer (:mod:`streams.worker.faust_layer`), installed here and nowhere else,
    once the installed Faust and aiokafka are the ones it was written for."""
    check_faust_patches()  # refuses (StartupError) a Faust the patches were not written for
    install_faust_patches(settings, commit_barrier)


def build_app(settings: Settings) -> faust.App:
    return faust.App(
        settings.group_id,  # the app id, or <app id>-audit for the audit role
        broker=settings.broker,
        broker_credentials=broker_credentials(settings),
        store="memory://",
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        # A standby keeps a hot copy of other workers' changelog partitions (kafka profile: 1).
        table_standby_replicas=settings.table_standby_replicas,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        broker_rebalance_timeout=settings.rebalance_timeout,
        # Static membership (LOOPGUARD_GROUP_INSTANCE_ID): None keeps dynamic membership.
        consumer_group_instance_id=settings.group_instance_id or None,
        # Exactly once the agent commits each batch itself; the timer is the longest interval.
        broker_commit_interval=(
            settings.max_commit_interval
            if settings.processing_guarantee == "exactly_once"
            else settings.commit_interval
        ),
        # Batching, fetch wait and exactly-once follow the broker profile (streams.settings).
        producer_max_batch_size=settings.producer_max_batch,
        processing_guarantee=settings.processing_guarantee,
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind=settings.web_bind,
        datadir=f"{settings.data_dir}/{{conf.name}}",
        producer_max_request_size=settings.max_message_bytes * 3,
        # SIGTERM/SIGINT end the worker within LOOPGUARD_SHUTDOWN_TIMEOUT whatever its stop
        # waits for (the database included); a second signal ends it at once (issue 26).
        Worker=worker_with_deadline(settings.shutdown_timeout),
    )


def load_gateway_keys(settings: Settings) -> GatewayKeys | None:
    """Every gateway's signing keys (``LOOPGUARD_GATEWAY_KEYS``, issue 40), or None when
    unset; a file that cannot be used stops the start with one line."""
    if not settings.gateway_keys:
        return None
    try:
        keys = GatewayKeys.load(settings.gateway_keys)
    except KeysError as exc:
        raise StartupError(f"LOOPGUARD_GATEWAY_KEYS: {exc}") from None
    log.info("signed events required: keys for %d gateways", len(keys.rings))
    return keys


def build_tables(app: faust.App, settings: Settings) -> tuple[Any, Any]:
    """The guarding agent's tables: run id -> RunState, session id -> its latest run id."""
    # The changelog carries RunState through our codec (Faust would pick JSON for a plain
    # class and hand dicts back on recovery), so declare its topic explicitly.
    runs_changelog = app.topic(
        f"{settings.app_id}-runs-changelog",
        key_type=bytes,
        key_serializer="raw",
        value_serializer=state_codec.CODEC_NAME,
        partitions=settings.partitions,
        compacting=True,
        acks=False,
        internal=True,
        maxsize=131_072,
        allow_empty=True,
    )
    runs = app.tables.add(
        RunsTable(
            app,
            name="runs",
            default=None,
            key_type=bytes,  # the raw run id
            # changelog partition = murmur2(session id) for a run with a session, else
            # murmur2(run id): the events topic's message key, so the same partition
            use_partitioner=True,
            changelog_topic=runs_changelog,
            beacon=app.tables.beacon,
        )
    )
    runs.value_serializer = state_codec.CODEC_NAME  # used when the table writes its changelog
    # Session scope: session id -> its latest run id, keyed like the session's events.
    sessions = app.Table(
        "sessions",
        default=None,
        key_type=bytes,
        value_type=bytes,
        use_partitioner=True,
        changelog_topic=app.topic(
            f"{settings.app_id}-sessions-changelog",
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
            compacting=True,
            internal=True,
            allow_empty=True,
        ),
    )
    sessions.key_serializer = sessions.value_serializer = "raw"
    return runs, sessions


def no_state(key: bytes) -> None:
    """The audit role's stand-in for the tables it does not hold (its processor only
    resolves configs: incidents, loops between agents)."""
    return None


def build_worker(settings: Settings) -> faust.App:
    """Build the worker's app, topics, tables, services and agents from ``settings``, for
    its role (``settings.role``): the guard's, the audit's or both."""
    commit_barrier = asyncio.Lock()
    apply_faust_patches(settings, commit_barrier)
    state_codec.register()
    tune_collector()  # and the start-up objects are frozen once recovery is done
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = build_app(settings)

    raw = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    events_topic = app.topic(settings.topics.events, **raw)
    control_topic = app.topic(settings.topics.control, **raw)
    deadletter_topic = app.topic(settings.topics.deadletter, **raw)
    # The guard's tables (the audit role has none: it reads no events' state).
    runs, sessions = build_tables(app, settings) if settings.guards else (None, None)

    kafka_options = settings.kafka_client_options()
    # Per-agent overrides published at run time (`loopguard config set`): every worker reads all.
    overrides = ConfigWatcher(settings.bootstrap_servers, settings.topics.config, **kafka_options)
    fleet = load_fleet_config(settings.config_file)
    configs = ConfigBook(fleet, overrides)
    overrides.resolve = configs.resolve_uncached  # versions around each recorded change
    registry = default_registry()
    metrics = WorkerMetrics()
    # Event age per stage: the consumer's fetches (streams.worker.fast_failover) note theirs.
    metrics.stage_ages.watch_topic(settings.topics.events)
    setattr(app, "loopguard_stage_ages", metrics.stage_ages)  # noqa: B010 - not on App's type
    # An idle consumer's fetch wait backs off (tansu answers an empty fetch only at its end).
    backoff = FetchBackoff(settings.fetch_max_wait_ms, settings.idle_fetch_max_wait_ms)
    setattr(app, "loopguard_fetch_backoff", backoff)  # noqa: B010 - read by the fetch patch
    audit = AuditWriter(settings.db_url, metrics=metrics)
    parts = WorkerParts(
        settings=settings,
        app=app,
        events_topic=events_topic,
        control_topic=control_topic,
        deadletter_topic=deadletter_topic,
        runs=runs,
        sessions=sessions,
        # Exactly once: a redelivered event's decisions were committed with its run's state.
        processor=EventProcessor(
            stored_values(runs) if runs is not None else no_state,
            configs.for_agent,
            stored_values(sessions) if sessions is not None else no_state,
            republish_duplicates=settings.processing_guarantee != "exactly_once",
        ),
        commit_barrier=commit_barrier,
        registry=registry,
        schema_topic=SchemaTopic(
            settings.bootstrap_servers, settings.topics.schemas, registry, **kafka_options
        ),
        overrides=overrides,
        fleet=fleet,
        audit=audit,
        expiry=RunExpiry(settings.run_idle_ttl),
        rekeyer=Rekeyer(settings),
        metrics=metrics,
        webhooks=WebhookNotifier.from_settings(settings, audit, metrics),
        keys=load_gateway_keys(settings),
    )
    agents = WorkerAgents(parts)
    agents.register()  # the guarding agent, the audit agents or both (settings.role)
    if not settings.audits:  # the guard role: /healthz and /metrics, no database
        register_health_views(app, metrics, agents.health, access=WebAccess.from_settings(settings))
        return app
    # Loop incidents (issue 28), when the config turns them on.
    register_incidents(parts, agents.batch_context)
    # Loops between agents (issue 28): the send calls guard_runs forwards, in their own agent.
    AgentCycles(
        app,
        settings,
        agents.batch_context,
        configs.for_agent,
        commit_barrier,
        metrics.observe_decisions,
    ).register()
    # HTTP API, status page and /metrics, served with `loopguard worker --web-port`.
    register_views(
        app,
        settings.db_url,
        metrics,
        health=agents.health,
        access=WebAccess.from_settings(settings),  # Host names, token (issue 26)
        # the run page's release and abort (issue 43)
        send_commands=functools.partial(send_commands, settings),
    )
    return app
