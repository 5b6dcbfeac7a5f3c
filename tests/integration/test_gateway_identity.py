"""Issue 40 items 2 and 4 on the real broker: with gateway keys, a gateway can neither stop nor
blind another gateway's run, and forged decisions pre-empt nothing.

The attacker has what a gateway has: write access to the events topic and the control topic's
contents (every run id and seq from the watermarks), its own signing key, and it knows the
victim's gateway id. Each attack is made against a run of the victim's, which then loops; the
loop must be blocked and aborted at the same calls as a loop nobody attacked.
"""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaProducer
from services import ENABLED, IN_TIME_BUDGET_MS

from streams.core.events import Action, Decision, Envelope, RunEnded, ToolCall
from streams.gateway.client import RunAborted
from streams.wire.avro import RunWatermark, encode_decision, encode_event, encode_watermark
from streams.wire.signing import KeyRing

pytestmark = pytest.mark.integration

VICTIM_KEY = {"v1": "victim-secret-0123456789abcdef"}
ATTACKER_KEY = {"a1": "attacker-secret-0123456789abcdef"}
KEYS = {"gateways": {"gw-victim": VICTIM_KEY, "gw-attacker": ATTACKER_KEY}}
CALLS = 40
SAME = {"text": "same page"}
DETECTORS = (
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
    "global_circuit_breaker",
    "consecutive_errors",
    "error_repeat",
    "unknown_tool",
    "run_aborted",
    "compaction_guard",
    "burst_repeat",
    "run_budget",
    "agent_cycle",
)


def drive_loop(run) -> tuple[list[int], int | None]:
    """The same call with the same result, call after call: which calls were refused, and
    the call at which the run was aborted (None: never)."""
    refused = []
    for call in range(CALLS):
        try:
            verdict = run.before_tool("read_page", {"url": "https://example.com/a"})
        except RunAborted:
            return refused, call
        if verdict.allowed:
            run.after_tool("read_page", {"url": "https://example.com/a"}, result=SAME)
        else:
            refused.append(call)
    return refused, None


def injected(run, gateway_id: str, start_seq: int, count: int) -> list:
    """``count`` copies of the victim's call at its next seqs, then a RunEnded, naming
    ``gateway_id``."""
    events = []
    for offset in range(count + 1):
        envelope = Envelope(
            run.run_id, run.agent_id, gateway_id, start_seq + offset, int(time.time() * 1000)
        )
        if offset == count:
            events.append(RunEnded(envelope=envelope, status="completed"))
        else:
            args = json.dumps({"url": "https://example.com/a"})
            events.append(ToolCall(envelope=envelope, tool_name="read_page", args_json=args))
    return events


def forged_decisions(run) -> list[Decision]:
    """Observe-only decisions at every id the victim's run could draw in 90 calls:
    12 detectors x 3 actions x 90 seqs = 3,240."""
    return [
        Decision(
            run_id=run.run_id,
            agent_id=run.agent_id,
            gateway_id="gw-victim",
            seq=seq,
            event_time=int(time.time() * 1000),
            action=action,
            detector=detector,
            severity="warning",
            count=1,
            tool_name="read_page",
            reason="nothing to see",
            enforced=False,
        )
        for seq in range(2, 92)
        for detector in DETECTORS
        for action in Action
    ]


def wait_dead_letters(pipeline, at_least: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        with pipeline.store() as store:
            count = store.dead_letter_count()
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.2)


def test_injected_events_and_forged_decisions_change_nothing_for_the_victim(
    pipeline_factory, migrated_db_url
) -> None:
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    pipeline.start_worker(LOOPGUARD_GATEWAY_KEYS=json.dumps(KEYS))
    victim = pipeline.client("gw-victim", wait_budget_ms=IN_TIME_BUDGET_MS, signing_keys=VICTIM_KEY)
    try:
        pipeline.wait_ready(victim, timeout=120)
    except Exception:
        print(pipeline.worker_logs())
        raise
    topics = pipeline.settings.topics
    producer = KafkaProducer(bootstrap_servers=pipeline.broker.bootstrap, acks="all")
    attacker_ring = KeyRing.of(ATTACKER_KEY)
    try:
        baseline = drive_loop(victim.start_run("support-bot"))
        refused, aborted_at = baseline
        assert refused and aborted_at is not None, baseline

        # 1. 40 calls at the victim's next seqs and a RunEnded: unsigned with the victim's
        # gateway id, signed with the attacker's key under the victim's gateway id, and
        # signed properly by the attacker under its own id (a run it did not start).
        run = victim.start_run("support-bot")
        victim.flush()
        attacks = [
            (injected(run, "gw-victim", run.seq + 1, CALLS), None),
            (injected(run, "gw-victim", run.seq + 1, CALLS), attacker_ring),
            (injected(run, "gw-attacker", run.seq + 1, CALLS), attacker_ring),
        ]
        sent = 0
        for events, ring in attacks:
            for event in events:
                value = encode_event(event)
                headers = ring.headers(value) if ring is not None else None
                key = run.run_id.encode()
                producer.send(topics.events, key=key, value=value, headers=headers)
                sent += 1
        producer.flush()
        assert drive_loop(run) == baseline
        assert wait_dead_letters(pipeline, sent) >= sent

        # 2. 3,240 forged observe-only decisions at every id the victim's run can draw, and
        # a watermark claiming the run was processed far ahead, ahead of the real ones.
        run = victim.start_run("support-bot")
        victim.flush()
        forged = forged_decisions(run)
        assert len(forged) == 3240
        key = run.run_id.encode()
        for decision in forged:
            producer.send(topics.control, key=key, value=encode_decision(decision))
        mark = RunWatermark(
            run_id=run.run_id,
            agent_id=run.agent_id,
            gateway_id="gw-victim",
            seq=10_000,
            event_time=0,
        )
        producer.send(topics.control, key=key, value=encode_watermark(mark))
        producer.flush()
        assert drive_loop(run) == baseline
        assert victim.forged >= 3240
        kept = victim.decisions(run.run_id)
        assert kept and all(decision.enforced for decision in kept)

        # The audit trail holds the worker's decisions for that run, none of the forged.
        deadline = time.monotonic() + 60
        while True:
            with pipeline.store() as store:
                rows = store.history(run.run_id)
            if {d.decision_id for d in kept} <= {d.decision_id for d in rows}:
                break
            assert time.monotonic() < deadline, (len(rows), len(kept))
            time.sleep(0.2)
        assert all(row.enforced for row in rows)
        assert {d.decision_id for d in rows} == {d.decision_id for d in kept}
    finally:
        producer.close()
