"""``loopguard config set`` and ``rm`` judge a change by its effect before publishing it
(issue 40): the key's config as the workers would resolve it now (the overrides on the config
topic over the workers' config file) and after the change, through the canonical loops of
:mod:`streams.core.config_canary`. A change under which a loop that was stopped is no longer
stopped is refused unless ``--force``; the workers flag it again whoever publishes it."""

from __future__ import annotations

import argparse
import os
from typing import Any

from streams.cli.common import InputError, settings_from_args
from streams.core.config import ConfigError, LoopDetectionConfig
from streams.core.config_canary import weakening
from streams.core.config_change import WEAKENED_LABEL
from streams.core.fleet import GLOBAL_KEY, FleetConfig, load_fleet_config


def add_effect_args(parser: argparse.ArgumentParser) -> None:
    """``--force`` and ``--config`` for a command that changes an override."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="publish even when the change weakens guarding (a canonical loop that is "
        "stopped now would no longer be); the workers still flag it GUARDING WEAKENED in "
        "their log, the webhooks and config history",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("LOOPGUARD_CONFIG") or None,
        help="the workers' --config file, the base the change is judged over (env "
        "LOOPGUARD_CONFIG; default: the built-in defaults)",
    )


def effective(fleet: FleetConfig, overrides: dict[str, dict[str, Any]], key: str) -> Any:
    """``key``'s config as the workers resolve it (``*``: agents without a block)."""
    base = fleet
    if GLOBAL_KEY in overrides:
        base = base.with_override(GLOBAL_KEY, overrides[GLOBAL_KEY], warn=False)
    if key != GLOBAL_KEY and key in overrides:
        base = base.with_override(key, overrides[key], warn=False)
    return base.for_agent(key)


def read_overrides(settings: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Current override per key from the config topic, and keys whose latest record is bad
    (workers ignore such a record and keep the previous block for the key)."""
    # Deferred, as every Kafka import here: kafka-python takes most of a second to import.
    from streams.kafka.config_topic import ConfigOverrides, record_key
    from streams.kafka.reader import TopicReader

    overrides = ConfigOverrides()
    reader = TopicReader(
        settings.bootstrap_servers,
        settings.topics.config,
        kafka_options=settings.kafka_client_options(),
        poll_ms=500,
    )
    with reader:
        for record in reader.records():
            overrides.apply(record_key(record), record.value)
    return overrides.blocks(), dict(overrides.invalid)


class WeakeningRefused(InputError):
    """A change that weakens guarding, published without ``--force`` (exit code 2)."""


def check_effect(args: argparse.Namespace, block: dict[str, Any] | None) -> None:
    """Refuse (:class:`WeakeningRefused`) publishing ``block`` (None: removing the override)
    for ``args.agent_id`` when it weakens guarding, unless ``args.force``."""
    if args.force:
        return
    try:
        fleet = load_fleet_config(args.config)
    except ConfigError as exc:
        raise InputError(f"invalid config: {exc}") from None
    from streams.kafka.reader import TopicNotFoundError  # deferred: kafka-python

    try:
        overrides, _invalid = read_overrides(settings_from_args(args))
    except TopicNotFoundError:  # no config topic yet: no overrides in force
        overrides = {}
    before: LoopDetectionConfig = effective(fleet, overrides, args.agent_id)
    changed = dict(overrides)
    if block is None:
        changed.pop(args.agent_id, None)
    else:
        changed[args.agent_id] = block
    after: LoopDetectionConfig = effective(fleet, changed, args.agent_id)
    lost = weakening(before, after)
    if lost:
        base = args.config or "the built-in defaults"
        raise WeakeningRefused(
            f"{WEAKENED_LABEL} for {args.agent_id} (over the config topic and {base}): "
            f"{lost}; not published (add --force to publish anyway)"
        )
