"""The benchmark's command line (``bench/quality_bench.py``): read the corpus, replay it
through each rule set, print the table or one JSON document."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from streams.core.config_error import ConfigError
from streams.core.fleet import FleetConfig, fleet_from_document, load_fleet_config

from .corpus import audit_labels, read_corpus, read_labels
from .peer_rules import PEERS
from .report import report_dict, report_lines
from .scores import score
from .verdicts import loopguard_verdicts, peer_verdicts

DEFAULT_BLOCK = {"enabled": True}
COMPAT_BLOCK = {"enabled": True, "compat": "openclaw"}


def block_fleet(block: dict[str, object]) -> FleetConfig:
    return fleet_from_document({"tools": {"loopDetection": block}})


def loopguard_sets(configs: list[str]) -> list[tuple[str, FleetConfig]]:
    """Each ``--config`` (default ``{enabled: true}``), then compat mode: OpenClaw's own
    detector as loopguard restates it."""
    sets = [(f"loopguard {Path(p).name}", load_fleet_config(p)) for p in configs]
    if not sets:
        sets = [("loopguard {enabled: true}", block_fleet(DEFAULT_BLOCK))]
    sets.append(("loopguard compat openclaw", block_fleet(COMPAT_BLOCK)))
    return sets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="quality_bench.py",
        description="Replay imported agent trajectories (`loopguard import` event files, "
        "each with its .outcomes.jsonl sidecar) through loopguard's core and the peers' "
        "published loop rules, and print what each did to resolved, unresolved and "
        "labelled runs.",
    )
    parser.add_argument("corpus", nargs="+", type=Path, help="event file or directory of them")
    parser.add_argument("--labels", type=Path, help="JSON lines {run_id, stuck, from_call, why}")
    parser.add_argument(
        "--labels-from-audit",
        metavar="DB_URL",
        help="also label the runs operators released (not stuck: a false stop) or aborted "
        "(stuck) in this audit trail (SQLAlchemy URL); they win over --labels",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="a loopguard fleet config (repeatable; default {enabled: true} for every agent)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document instead")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        sets = loopguard_sets(args.config)
        events, runs = read_corpus(args.corpus)
        labels = read_labels(args.labels)
        if args.labels_from_audit:
            labels.update(audit_labels(args.labels_from_audit))
    except (ConfigError, ValueError, OSError) as exc:
        print(f"quality_bench: {exc}", file=sys.stderr)
        return 2
    rows = [
        score(name, runs, loopguard_verdicts(events, runs, fleet), labels) for name, fleet in sets
    ]
    rows += [
        score(make().label, runs, peer_verdicts(runs, make), labels) for make in PEERS.values()
    ]
    if args.json:
        sources = [str(path) for path in args.corpus]
        print(json.dumps(report_dict(rows, runs, labels, sources), indent=2))
        return 0
    print("\n".join(report_lines(rows, runs, labels)))
    elapsed = time.perf_counter() - started
    print(f"\n{len(events):,} events, {len(rows)} rule sets, {elapsed:.1f} s")
    return 0
