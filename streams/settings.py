"""Worker settings, read from ``LOOPGUARD_*`` environment variables.

The worker is built from one :class:`Settings` (:func:`streams.worker.bootstrap.build_worker`);
``loopguard worker`` puts its flags on top of them (``worker_settings`` in the CLI), compose
files and tests set the variables directly.
Secrets (SASL password, database URL with a password) are never logged:
:meth:`Settings.redacted` is what goes to the log.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Literal, cast

from streams.observability.redaction import redact_url, redact_urls

Guarantee = Literal["at_least_once", "exactly_once"]  # Faust's processing guarantees
GUARANTEES: tuple[Guarantee, ...] = ("at_least_once", "exactly_once")
ControlDelivery = Literal["immediate", "transactional"]  # exactly once: decisions' path
CONTROL_DELIVERIES: tuple[ControlDelivery, ...] = ("immediate", "transactional")
WatermarkFormat = Literal["batched", "per_run"]  # RunWatermarks or RunWatermark records
WATERMARK_FORMATS: tuple[WatermarkFormat, ...] = ("batched", "per_run")
Role = Literal["all", "guard", "audit"]  # what one worker process runs (docs/operations.md)
ROLES: tuple[Role, ...] = ("all", "guard", "audit")

DEFAULT_DB_URL = "sqlite:///loopguard-data/audit.db"


def _env(name: str, default: str) -> str:
    return os.environ.get(f"LOOPGUARD_{name}", default)


def _float(name: str, default: float) -> float:
    return float(_env(name, str(default)))


def _positive(name: str, default: float) -> float:
    """``LOOPGUARD_<name>`` in seconds, above 0 (a one-line error otherwise)."""
    value = _float(name, default)
    if not value > 0:
        raise ValueError(f"LOOPGUARD_{name}={value!r} must be more than 0 seconds")
    return value


def _int(name: str, default: int) -> int:
    return int(_env(name, str(default)))


def _choice(name: str, default: str, choices: tuple[str, ...], what: str) -> str:
    """``LOOPGUARD_<name>``, which must be one of ``choices`` (a one-line error names them)."""
    value = _env(name, default)
    if value not in choices:
        raise ValueError(
            f"LOOPGUARD_{name}={value!r} is not {what} (choose {' or '.join(choices)})"
        )
    return value


@dataclass(frozen=True)
class Topics:
    events: str = "loopguard.events"
    control: str = "loopguard.control"
    deadletter: str = "loopguard.deadletter"
    config: str = "loopguard.config"
    schemas: str = "loopguard.schemas"
    # issue 28: loop incidents, and the failures and decisions re-keyed by their signature
    incidents: str = "loopguard.incidents"
    incident_signals: str = "loopguard.incident-signals"
    # issue 28: agent-to-agent send calls, re-keyed by chain id (else gateway) for the
    # loops-between-agents agent (streams/worker/agent_cycles.py)
    agent_sends: str = "loopguard.agent-sends"

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        names = (name.replace("_", "-") for name in cls.__dataclass_fields__)
        return cls(*(f"{prefix}.{name}" for name in names))

    @classmethod
    def from_env(cls) -> Topics:
        return cls.with_prefix(_env("TOPIC_PREFIX", "loopguard"))


@dataclass(frozen=True)
class BrokerProfile:
    """Settings that follow from what the broker can do; the worker logs which one it runs."""

    name: str
    replication: int
    min_insync_replicas: int
    producer_max_batch: int  # bytes per producer batch (Faust's producer_max_batch_size)
    fetch_max_wait_ms: int
    processing_guarantee: Guarantee
    # Failover (issue 26): hot copies of the runs table on other workers, and how soon the
    # group notices a member that died without leaving (a SIGKILLed worker's partitions are
    # reassigned only when its session expires; 6 s is the least a default broker accepts).
    table_standby_replicas: int = 0
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    # The fetch wait an idle worker backs off to (streams.worker.fetch_backoff); not above
    # fetch_max_wait_ms: no back-off.
    idle_fetch_max_wait_ms: int = 500


PROFILES = {
    # Apache Kafka, what production runs: replicated topics, batching, exactly once (an
    # events partition's offsets, the changelog writes and decisions of its events, a session
    # run's too, in one transaction; Faust 0.15.3 needs the patches in
    # streams/worker/exactly_once.py for that to hold across rebalances, crashes and session
    # keying). LOOPGUARD_PROCESSING_GUARANTEE=at_least_once trades it for latency.
    # One standby replica: a surviving worker already holds the runs of a killed one's
    # partitions and guards them again seconds after its session expires (docs/operations.md).
    "kafka": BrokerProfile(
        "kafka",
        3,
        2,
        16_384,
        500,
        "exactly_once",
        table_standby_replicas=1,
        session_timeout=6.0,
        heartbeat_interval=1.0,
    ),
    # The embedded tansu broker: one node, no transactions; it reports a topic's end offset
    # per batch (table recovery reads each changelog to its last record instead, so records
    # are batched as on Kafka: streams/kafka/true_end.py) and holds an empty fetch for the
    # whole wait, even when records arrive meanwhile (a short wait keeps decisions prompt:
    # 5 ms, at 200 idle fetches/s; 20 ms added 10 ms to every decision on average).
    # Idle, the wait backs off to 500 ms (streams.worker.fetch_backoff: 2 fetches/s instead of
    # ~200); the first event after an idle spell waits at most that.
    "tansu": BrokerProfile("tansu", 1, 1, 16_384, 5, "at_least_once", idle_fetch_max_wait_ms=500),
}


@dataclass(frozen=True)
class Settings:
    app_id: str = "loopguard"
    # "guard": the guarding agent and its tables only (with /healthz and /metrics); "audit":
    # the audit trail, incidents, loops between agents, config audit and the web pages, in a
    # consumer group of its own (group_id); "all": everything in one process (the default).
    role: Role = "all"
    broker: str = "kafka://127.0.0.1:9092"
    db_url: str = DEFAULT_DB_URL
    config_file: str = ""
    partitions: int = 8
    profile: str = "kafka"
    replication: int = PROFILES["kafka"].replication
    min_insync_replicas: int = PROFILES["kafka"].min_insync_replicas
    data_dir: str = "loopguard-data"
    web_enabled: bool = False
    web_port: int = 6066
    web_bind: str = "127.0.0.1"  # 0.0.0.0 in containers, so Prometheus can scrape /metrics
    # HTTP access (streams.web.access): a bearer/login token ("" = open), whether /healthz and
    # /metrics need it too (probes and scrapers often carry none), the Host names answered.
    web_token: str = ""
    web_token_healthz: bool = False
    web_token_metrics: bool = False
    web_allowed_hosts: str = ""  # comma-separated; "" = localhost and the bind host; "*" = any
    # The status pages' address as operators reach them (https://loopguard.example.com), for
    # the release and abort links of a held call's webhook (issue 43); "" sends no links.
    web_public_url: str = ""
    # Runs held in this worker's table at most (0: no cap); streams.state.expiry says who goes.
    max_runs: int = 200_000
    # Runs one gateway may hold in this worker's table (0: only the cap bounds it); past it
    # the gateway's own runs go first (streams.state.eviction, issue 40).
    max_runs_per_gateway: int = 0
    session_timeout: float = PROFILES["kafka"].session_timeout
    heartbeat_interval: float = PROFILES["kafka"].heartbeat_interval
    table_standby_replicas: int = PROFILES["kafka"].table_standby_replicas
    rebalance_timeout: float = 60.0
    # Static group membership (Kafka's group.instance.id, KIP-345): a stable name per worker,
    # such as a StatefulSet pod's. A worker that comes back under its name within the session
    # timeout gets its partitions back with no rebalance; a static member never leaves the
    # group on stop, so its partitions wait for the session timeout. "" = dynamic membership.
    group_instance_id: str = ""
    max_message_bytes: int = 1_048_576
    run_idle_ttl: float = 3600.0
    # Seconds between expiry sweeps (idle runs out, the runs cap and per-gateway quota
    # enforced): a table can overfill its cap by what arrives in one interval.
    expiry_interval: float = 10.0
    # A crashed agent stops the worker; a stop that hangs (Faust #324) ends after this.
    crash_exit_seconds: float = 15.0
    # SIGTERM/SIGINT: the worker exits within this many seconds whatever its stop waits for
    # (streams.worker.shutdown); a second signal ends it at once.
    shutdown_timeout: float = 30.0
    audit_batch: int = 500
    fetch_max_wait_ms: int = PROFILES["kafka"].fetch_max_wait_ms
    idle_fetch_max_wait_ms: int = PROFILES["kafka"].idle_fetch_max_wait_ms
    batch_size: int = 500
    batch_window: float = 0.02
    commit_interval: float = 0.5
    # Exactly once the agent commits after each batch (streams.worker.exactly_once); Faust's
    # commit timer then runs this often, for offsets no batch commits (Kafka Streams' 100 ms).
    max_commit_interval: float = 0.1
    # Exactly once: how soon a transactional producer retries (aiokafka's default is 100 ms;
    # every commit's successor meets CONCURRENT_TRANSACTIONS while the markers are written).
    transaction_retry_backoff_ms: int = 5
    # Exactly once, how decisions and watermarks reach the control topic: "immediate" (sent
    # outside the transaction, acknowledged before the batch's state and offsets are
    # committed: gateways see them one produce round trip after the batch) or
    # "transactional" (in the batch's transaction: visible once it commits).
    # streams.worker.exactly_once says why either keeps the audit trail whole.
    control_delivery: ControlDelivery = "immediate"
    # How a batch's watermarks go out: "batched", one RunWatermarks record per control
    # partition (what the worker, its gateways and its audit agent read no longer grows with
    # the runs in a batch), or "per_run", one RunWatermark record per run, for gateways from
    # before RunWatermarks (schemas/RunWatermarks.avsc).
    watermarks: WatermarkFormat = "batched"
    producer_max_batch: int = PROFILES["kafka"].producer_max_batch
    processing_guarantee: Guarantee = PROFILES["kafka"].processing_guarantee
    fast_handoff: bool = True
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str = ""
    # How long a Kafka client waits for its first broker answer: long for long-lived clients
    # (a worker may start before its brokers), short for commands (`loopguard replay`, ...).
    bootstrap_timeout_ms: int = 30_000
    # Webhooks on block/abort (streams.webhooks.notifier): a default URL and a JSON object of
    # agent id -> URL ("" turns an agent off). Webhook URLs carry tokens: never logged.
    webhook_url: str = ""
    webhook_urls: str = ""
    webhook_timeout: float = 5.0
    webhook_attempts: int = 6
    webhook_queue: int = 1000
    # issue 40: every gateway's signing keys (streams.wire.signing), a path or the JSON
    # itself; "" accepts unsigned events and signs nothing (as before).
    gateway_keys: str = ""
    topics: Topics = field(default_factory=Topics)

    @classmethod
    def for_profile(cls, profile: str, **overrides: object) -> Settings:
        """The settings a broker profile implies, with explicit ``overrides`` on top."""
        try:
            chosen = PROFILES[profile]
        except KeyError:
            raise ValueError(
                f"unknown broker profile {profile!r} (choose {' or '.join(PROFILES)})"
            ) from None
        defaults = asdict(chosen)
        defaults["profile"] = defaults.pop("name")
        return cls(**{**defaults, **overrides})  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, profile_name: str | None = None) -> Settings:
        """The settings the ``LOOPGUARD_*`` variables give, on ``profile_name``'s defaults
        (the worker's ``--broker-profile``) or else ``LOOPGUARD_BROKER_PROFILE``'s."""
        chosen = profile_name or _env("BROKER_PROFILE", "kafka")
        profile = PROFILES.get(chosen)
        if profile is None:
            raise ValueError(
                f"broker profile {chosen!r} is not one (choose {' or '.join(PROFILES)}; "
                "LOOPGUARD_BROKER_PROFILE or --broker-profile)"
            )
        guarantee = _choice(
            "PROCESSING_GUARANTEE",
            profile.processing_guarantee,
            GUARANTEES,
            "a processing guarantee",
        )
        delivery = _choice(
            "CONTROL_DELIVERY", "immediate", CONTROL_DELIVERIES, "a control delivery"
        )
        watermarks = _choice("WATERMARKS", cls.watermarks, WATERMARK_FORMATS, "a watermark format")
        return cls(
            profile=profile.name,
            app_id=_env("APP_ID", cls.app_id),
            role=cast(Role, _choice("ROLE", cls.role, ROLES, "a worker role")),
            broker=_env("BROKER", cls.broker),
            db_url=_env("DB_URL", cls.db_url),
            config_file=_env("CONFIG", ""),
            partitions=_int("PARTITIONS", cls.partitions),
            replication=_int("REPLICATION", profile.replication),
            min_insync_replicas=_int("MIN_INSYNC_REPLICAS", profile.min_insync_replicas),
            data_dir=_env("DATA_DIR", cls.data_dir),
            web_enabled=_env("WEB", "0") == "1",
            web_port=_int("WEB_PORT", cls.web_port),
            web_bind=_env("WEB_BIND", cls.web_bind),
            web_token=_env("WEB_TOKEN", ""),
            web_token_healthz=_env("WEB_TOKEN_HEALTHZ", "0") == "1",
            web_token_metrics=_env("WEB_TOKEN_METRICS", "0") == "1",
            web_allowed_hosts=_env("WEB_ALLOWED_HOSTS", ""),
            web_public_url=_env("WEB_PUBLIC_URL", "").rstrip("/"),
            max_runs=_int("MAX_RUNS", cls.max_runs),
            max_runs_per_gateway=_int("MAX_RUNS_PER_GATEWAY", cls.max_runs_per_gateway),
            session_timeout=_float("SESSION_TIMEOUT", profile.session_timeout),
            heartbeat_interval=_float("HEARTBEAT_INTERVAL", profile.heartbeat_interval),
            table_standby_replicas=_int("STANDBY_REPLICAS", profile.table_standby_replicas),
            rebalance_timeout=_float("REBALANCE_TIMEOUT", cls.rebalance_timeout),
            group_instance_id=_env("GROUP_INSTANCE_ID", ""),
            max_message_bytes=_int("MAX_MESSAGE_BYTES", cls.max_message_bytes),
            run_idle_ttl=_float("RUN_IDLE_TTL", cls.run_idle_ttl),
            expiry_interval=_positive("EXPIRY_INTERVAL", cls.expiry_interval),
            crash_exit_seconds=_float("CRASH_EXIT_SECONDS", cls.crash_exit_seconds),
            shutdown_timeout=_float("SHUTDOWN_TIMEOUT", cls.shutdown_timeout),
            audit_batch=_int("AUDIT_BATCH", cls.audit_batch),
            fetch_max_wait_ms=_int("FETCH_MAX_WAIT_MS", profile.fetch_max_wait_ms),
            idle_fetch_max_wait_ms=_int("IDLE_FETCH_MAX_WAIT_MS", profile.idle_fetch_max_wait_ms),
            batch_size=_int("BATCH_SIZE", cls.batch_size),
            batch_window=_float("BATCH_WINDOW_MS", cls.batch_window * 1000) / 1000,
            commit_interval=_float("COMMIT_INTERVAL", cls.commit_interval),
            max_commit_interval=_float("MAX_COMMIT_INTERVAL", cls.max_commit_interval),
            transaction_retry_backoff_ms=_int(
                "TRANSACTION_RETRY_BACKOFF_MS", cls.transaction_retry_backoff_ms
            ),
            producer_max_batch=_int("PRODUCER_MAX_BATCH", profile.producer_max_batch),
            processing_guarantee=cast(Guarantee, guarantee),
            control_delivery=cast(ControlDelivery, delivery),
            watermarks=cast(WatermarkFormat, watermarks),
            fast_handoff=_int("FAST_HANDOFF", int(cls.fast_handoff)) != 0,
            security_protocol=_env("SECURITY_PROTOCOL", cls.security_protocol),
            sasl_mechanism=_env("SASL_MECHANISM", ""),
            sasl_username=_env("SASL_USERNAME", ""),
            sasl_password=_env("SASL_PASSWORD", ""),
            ssl_cafile=_env("SSL_CAFILE", ""),
            bootstrap_timeout_ms=_int("BOOTSTRAP_TIMEOUT_MS", cls.bootstrap_timeout_ms),
            webhook_url=_env("WEBHOOK_URL", ""),
            webhook_urls=_env("WEBHOOK_URLS", ""),
            webhook_timeout=_float("WEBHOOK_TIMEOUT", cls.webhook_timeout),
            webhook_attempts=_int("WEBHOOK_ATTEMPTS", cls.webhook_attempts),
            webhook_queue=_int("WEBHOOK_QUEUE", cls.webhook_queue),
            gateway_keys=_env("GATEWAY_KEYS", ""),
            topics=Topics.from_env(),
        )

    @property
    def group_id(self) -> str:
        """The Faust app id (consumer group, transactional ids, internal topics' prefix) this
        role runs under: the app id for the guarding roles, ``<app id>-audit`` for the audit
        role, so its agents never share a group with the guard's (Faust assigns every
        member the same topics) nor its transactional ids."""
        return f"{self.app_id}-audit" if self.role == "audit" else self.app_id

    @property
    def guards(self) -> bool:
        """Whether this worker runs the guarding agent (roles guard and all)."""
        return self.role != "audit"

    @property
    def audits(self) -> bool:
        """Whether this worker writes the audit trail and serves the pages (audit and all)."""
        return self.role != "guard"

    @property
    def bootstrap_servers(self) -> list[str]:
        """``kafka://a:1;kafka://b:2`` → ``["a:1", "b:2"]`` for kafka-python/aiokafka."""
        return [part.split("://", 1)[-1] for part in re.split(r"[;,]", self.broker) if part]

    def kafka_client_options(self) -> dict[str, object]:
        """Security options in kafka-python's spelling (admin, gateway client, tools)."""
        options: dict[str, object] = {
            "security_protocol": self.security_protocol,
            "bootstrap_timeout_ms": self.bootstrap_timeout_ms,
        }
        if self.sasl_mechanism:
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.ssl_cafile:
            options["ssl_cafile"] = self.ssl_cafile
        return options

    def redacted(self) -> dict[str, object]:
        data = asdict(self)
        if data["sasl_password"]:
            data["sasl_password"] = "***"
        data["db_url"] = redact_url(self.db_url)
        data["broker"] = redact_urls(self.broker)
        if data["web_token"]:
            data["web_token"] = "***"
        for name in ("webhook_url", "webhook_urls"):
            if data[name]:
                data[name] = "***"
        if data["gateway_keys"].lstrip().startswith("{"):  # the keys themselves, not a path
            data["gateway_keys"] = "***"
        return data
