"""``loopguard config set | rm | show``: per-agent overrides on the compacted config topic
(``check``, which needs no broker, is in :mod:`streams.cli.config_check`).

Every worker follows ``<prefix>.config`` (:mod:`streams.kafka.config_topic`): the record keyed by an
agent id replaces that agent's ``tools.loopDetection`` block, the record keyed ``*`` replaces
the global block, and a tombstone removes the override; all without a restart. Blocks are
validated with :mod:`streams.core.config` before anything is sent, so a worker never sees a block
it would refuse; an invalid block exits with code 2 and the offending field's path.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import socket
import sys
from typing import Any

from streams.cli.common import (
    EXIT_OK,
    InputError,
    add_db_arg,
    add_topic_args,
    run_reporting_errors,
    settings_from_args,
)
from streams.cli.config_check import add_check_parser, run_check
from streams.cli.config_effect import add_effect_args, check_effect, read_overrides
from streams.cli.query_commands import positive_int, table
from streams.cli.times import format_ms
from streams.core.config import ConfigError, resolve
from streams.core.config_change import (
    CLIENT_ID_HEADER,
    HOST_HEADER,
    PRINCIPAL_HEADER,
    SOURCE_CLI,
    SOURCE_HEADER,
    USER_HEADER,
    WEAKENED_LABEL,
    ConfigChange,
)
from streams.core.config_files import parse_config_text, read_config_file
from streams.core.config_limits import MAX_CONFIG_RECORD_BYTES
from streams.core.fleet import (
    GLOBAL_KEY,
    FleetConfig,
    check_override,
    load_fleet_config,
    override_record,
)


def add_config_parser(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "config",
        help="set, remove or show per-agent config overrides on the config topic; check a file",
        description="Manage run-time overrides of tools.loopDetection on the compacted "
        "config topic (PREFIX.config; key = agent id, '*' = the global block). Every worker "
        "applies a change within about a second, without a restart. An agent override "
        "replaces that agent's block from the worker's --config file (merged over the "
        "global block as usual); '*' replaces the file's global block.",
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    set_ = actions.add_parser(
        "set",
        help="publish an override block for an agent (or '*' for the global block)",
        description="Validate a tools.loopDetection block and publish it as the override "
        "for AGENT_ID ('*': the global block). The file holds the block itself, e.g. "
        "{warningThreshold: 3, enabled: true}, or a document with tools.loopDetection. "
        "Invalid blocks are refused with the field's path (exit code 2), and so is a block "
        "that weakens guarding unless --force: canonical loops (one per detector family) "
        "are played under the key's config now and with the block, and one that would no "
        "longer be stopped refuses it.",
    )
    set_.add_argument("agent_id", metavar="AGENT_ID", help="agent id, or '*' for the global block")
    set_.add_argument(
        "--file",
        required=True,
        metavar="FILE",
        help="block file: JSON5 or JSON, YAML for .yaml/.yml; '-' reads JSON5 from stdin",
    )
    add_effect_args(set_)
    add_topic_args(set_)

    rm = actions.add_parser(
        "rm",
        help="remove an agent's override (publishes a tombstone)",
        description="Publish a tombstone for AGENT_ID ('*': the global override): workers "
        "go back to the block from their --config file. Refused when that weakens guarding "
        "(as for set), unless --force.",
    )
    rm.add_argument("agent_id", metavar="AGENT_ID", help="agent id, or '*' for the global block")
    add_effect_args(rm)
    add_topic_args(rm)

    show = actions.add_parser(
        "show",
        help="print the overrides currently on the config topic",
        description="Read the config topic from the beginning and print the override in force "
        "per key, with the config version each agent's decisions will carry "
        "(Decision.config_version) over the workers' config file (--config, or "
        "LOOPGUARD_CONFIG as for workers): the version `config check FILE` and `config "
        "history` show too. Without a file, over the built-in defaults, and it says so.",
    )
    show.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        help="the workers' --config file, to compute the config versions their decisions "
        "carry (env LOOPGUARD_CONFIG; default: the built-in defaults)",
    )
    show.add_argument(
        "--json", action="store_true", help="print JSON lines: one JSON object, on one line"
    )
    add_topic_args(show)
    add_check_parser(actions)

    history = actions.add_parser(
        "history",
        help="list the config changes the workers recorded, newest first",
        description="Every config change the workers recorded in the audit trail, newest "
        "first: records on the config topic (set, removed, or refused as invalid), with who "
        "sent them as far as Kafka can tell (the SASL principal, user@host and client id "
        "that `loopguard config` attaches as record headers; self-declared, see "
        "docs/operations.md), and the worker's --config file when it changed. VERSION is the "
        "key's effective config version before -> after.",
    )
    history.add_argument("--agent", metavar="KEY", help="only changes of this agent id ('*', "
                         "the global block; '(file)', the workers' config file)")  # fmt: skip
    history.add_argument(
        "--limit",
        type=positive_int,
        default=HISTORY_LIMIT,
        help=f"at most this many changes, >= 1 (default {HISTORY_LIMIT})",
    )
    history.add_argument(
        "--json", action="store_true", help="print JSON lines: one JSON object per change"
    )
    add_db_arg(history)
    return parser


HISTORY_LIMIT = 50


class OverrideError(InputError):
    """An override block cannot be used (exit code 2); the message names the field or the line."""

    def __init__(self, why: str) -> None:
        super().__init__(f"invalid override: {why}")


def load_block(path: str) -> Any:
    """Parse a block file (JSON5/JSON, or YAML by extension; ``-`` is JSON5 on stdin)."""
    try:
        return parse_config_text(sys.stdin.read(), path) if path == "-" else read_config_file(path)
    except ConfigError as exc:
        raise OverrideError(str(exc)) from None


def check_agent_id(agent_id: str) -> None:
    if not agent_id or agent_id != agent_id.strip():
        raise OverrideError(f"agent id {agent_id!r}: must be non-empty, without outer spaces")


def validate_override(agent_id: str, doc: Any) -> dict[str, Any]:
    """The block to publish, checked exactly as a worker checks a config record."""
    check_agent_id(agent_id)
    if isinstance(doc, dict) and "agents" in doc:
        raise OverrideError(
            "expected one tools.loopDetection block (or {tools: {loopDetection: ...}}), "
            "not a whole fleet config with agents.list"
        )
    if isinstance(doc, dict) and "tools" in doc:
        tools = doc["tools"]
        extra = sorted(set(doc) - {"tools"})
        if extra:
            raise OverrideError(f"{extra[0]}: unexpected next to tools")
        if not isinstance(tools, dict) or "loopDetection" not in tools:
            raise OverrideError("tools.loopDetection: missing")
        doc = tools["loopDetection"]
    try:
        return check_override(agent_id, doc)
    except ConfigError as exc:
        raise OverrideError(str(exc)) from None


def effective_versions(fleet: FleetConfig, overrides: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Config version per override key, resolved the way the workers resolve it."""
    base = fleet
    if GLOBAL_KEY in overrides:
        base = fleet.with_override(GLOBAL_KEY, overrides[GLOBAL_KEY])
    versions = {GLOBAL_KEY: resolve(base.global_block).version}
    for key, block in overrides.items():
        if key != GLOBAL_KEY:
            versions[key] = base.with_override(key, block).for_agent(key).version
    return versions


def _ensure_config_topic(settings: Any) -> None:
    """Create the compacted config topic when missing (same spec as ``ensure_topics``)."""
    # Deferred (kafka-python), as in _publish and read_overrides.
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    from streams.kafka.topics import topic_specs

    admin = KafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id="loopguard-config",
        **settings.kafka_client_options(),
    )
    try:
        if settings.topics.config in set(admin.list_topics()):
            return
        spec = next(s for s in topic_specs(settings) if s.name == settings.topics.config)
        with contextlib.suppress(TopicAlreadyExistsError):  # another client was faster
            admin.create_topics([spec])
    finally:
        admin.close()


CLIENT_ID = "loopguard-config"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return str(os.getuid())


def sender_headers(settings: Any, client_id: str = CLIENT_ID) -> list[tuple[str, bytes]]:
    """Who sends a config record, as record headers: the SASL principal this client
    authenticates as (when SASL is on), the OS user, the host and the client id. Workers
    store them with the change; they are self-declared (the broker's ACLs decide who may
    write the config topic at all)."""
    headers = {
        SOURCE_HEADER: SOURCE_CLI,
        CLIENT_ID_HEADER: client_id,
        USER_HEADER: _user(),
        HOST_HEADER: socket.gethostname(),
    }
    if settings.sasl_mechanism and settings.sasl_username:
        headers[PRINCIPAL_HEADER] = f"User:{settings.sasl_username}"
    return [(name, value.encode()) for name, value in headers.items()]


def _publish(args: argparse.Namespace, value: bytes | None) -> tuple[str, Any]:
    """Publish ``value`` (None: a tombstone) for ``args.agent_id`` with the sender headers;
    the topic and where it landed (the record metadata)."""
    from kafka import KafkaProducer

    settings = settings_from_args(args)
    _ensure_config_topic(settings)
    producer = KafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        client_id=CLIENT_ID,
        **settings.kafka_client_options(),
    )
    try:
        topic = settings.topics.config
        sent = producer.send(
            topic, key=args.agent_id.encode(), value=value, headers=sender_headers(settings)
        )
        return topic, sent.get(timeout=30)
    finally:
        producer.close()


def run_config(args: argparse.Namespace) -> int:
    if args.config_command == "history":  # the audit trail: no Kafka client involved
        return run_history(args)
    handler = {"set": _set, "rm": _rm, "show": _show, "check": run_check}[args.config_command]
    return run_reporting_errors(f"config {args.config_command}", handler, args)


def _subject(agent_id: str) -> str:
    return "the global block" if agent_id == GLOBAL_KEY else f"agent {agent_id}"


def _set(args: argparse.Namespace) -> int:
    block = validate_override(args.agent_id, load_block(args.file))
    value = override_record(block)
    if len(value) > MAX_CONFIG_RECORD_BYTES:
        raise OverrideError(
            f"{len(value):,} bytes as a record, more than {MAX_CONFIG_RECORD_BYTES:,} "
            "(MAX_CONFIG_RECORD_BYTES): workers would refuse it"
        )
    check_effect(args, block)
    topic, meta = _publish(args, value)
    print(
        f"override for {_subject(args.agent_id)} published to {topic} "
        f"(partition {meta.partition}, offset {meta.offset}): {value.decode()}"
    )
    return EXIT_OK


def _rm(args: argparse.Namespace) -> int:
    check_agent_id(args.agent_id)
    check_effect(args, None)
    topic, meta = _publish(args, None)
    print(
        f"override for {_subject(args.agent_id)} removed (tombstone at {topic} "
        f"partition {meta.partition}, offset {meta.offset})"
    )
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    try:
        fleet = load_fleet_config(args.config)
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None
    settings = settings_from_args(args)
    overrides, invalid = read_overrides(settings)
    versions = effective_versions(fleet, overrides)
    if args.json:
        doc = {
            "topic": settings.topics.config,
            "overrides": overrides,
            "config_versions": versions,
            "invalid": invalid,
            "config": args.config,  # the file the versions are over; null: the defaults
        }
        print(json.dumps(doc, ensure_ascii=False, sort_keys=True))
        return EXIT_OK
    if not overrides and not invalid:
        print(f"no overrides on {settings.topics.config}")
    for key in sorted(overrides):
        block = json.dumps(overrides[key], sort_keys=True, ensure_ascii=False)
        print(f"{key:<24} config_version={versions[key]}  {block}")
    if GLOBAL_KEY not in overrides:
        print(f"{'(agents without override)':<24} config_version={versions[GLOBAL_KEY]}")
    for key in sorted(invalid):
        print(f"{key:<24} INVALID (ignored by workers): {invalid[key]}")
    print(versions_base(args.config))
    return EXIT_OK


def versions_base(config: str | None) -> str:
    """What ``config show``'s versions are computed over: a version over the built-in
    defaults is not the workers' when they run with a file (issue 41: three commands showed
    three versions for one config)."""
    if config:
        return f"config versions over {config}"
    return (
        "config versions over the built-in defaults (no --config, LOOPGUARD_CONFIG unset): "
        "give the workers' config file for the versions their decisions carry"
    )


HISTORY_COLUMNS = ("time (UTC)", "key", "action", "source", "sender", "version", "value")


def _history_row(change: ConfigChange) -> list[str]:
    value = change.error if change.error else (change.value or "-")
    if len(value) > 80:
        value = value[:79] + "…"
    version = f"{change.version_before or '-'} -> {change.version_after or '-'}"
    return [
        format_ms(change.changed_at),
        change.agent_key,
        change.action
        + (" (guarding off for all)" if change.disables else "")
        + (f" ({WEAKENED_LABEL})" if change.weakened else ""),
        change.source,
        change.sender,
        version,
        value,
    ]


def run_history(args: argparse.Namespace) -> int:
    """``loopguard config history``: the recorded changes, newest first."""
    from sqlalchemy import inspect

    from streams.audit.config_changes import config_history
    from streams.cli.common import TrailError, read_trail

    with read_trail(args.db) as store:
        if not inspect(store.engine).has_table("config_changes"):
            raise TrailError(
                "the audit trail has no config history yet: run `loopguard migrate` (or "
                "start a worker of this version)"
            )
        changes = config_history(store, agent=args.agent, limit=args.limit)
    if args.json:
        for change in changes:
            print(json.dumps(change.to_dict(), ensure_ascii=False, sort_keys=True))
        return EXIT_OK
    if not changes:
        which = f" for {args.agent!r}" if args.agent is not None else ""
        print(f"no config changes recorded{which}")
        return EXIT_OK
    for line in table(HISTORY_COLUMNS, [_history_row(c) for c in changes]):
        print(line)
    for change in changes:  # the effect, whole: too long for the table's value column
        if change.weakened:
            print(
                f"{WEAKENED_LABEL} by the change of {change.agent_key} at "
                f"{format_ms(change.changed_at)}: {change.weakened}"
            )
    return EXIT_OK
