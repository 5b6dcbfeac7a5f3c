"""process_batch with gateway keys (issue 40): only events their gateway signed are applied, a
run takes events from the gateway that started it only, and every control record goes out
signed for the gateway it is about."""

from __future__ import annotations

from dataclasses import dataclass, field

from core_helpers import Run, fleet, text_result

from streams.core.run_state import RunState
from streams.service.batch import BatchOutput, BatchTopics, process_batch
from streams.service.config_book import ConfigBook
from streams.service.processor import EventProcessor
from streams.service.records import BatchContext
from streams.wire.avro import RunWatermarks, decode_control, decode_dead_letter, encode_event
from streams.wire.schema_registry import default_registry
from streams.wire.signing import GatewayKeys, KeyRing, check_control

TOPICS = BatchTopics(
    events="lg.events", control="lg.control", deadletter="lg.deadletter", changelog="lg-changelog"
)
VICTIM = KeyRing.of({"v1": "victim-secret-0123456789"})
ATTACKER = KeyRing.of({"a1": "attacker-secret-0123456789"})
KEYS = GatewayKeys({"gw-victim": VICTIM, "gw-attacker": ATTACKER})


class NoOverrides:
    version = 0

    def get(self, key: str) -> None:
        return None


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


def partition_for(topic: str, key: bytes | None) -> int:
    return sum(key or b"") % 2


class Worker:
    def __init__(self, keys: GatewayKeys | None = KEYS) -> None:
        self.table: dict[bytes, RunState] = {}
        configs = ConfigBook(fleet({"enabled": True}), NoOverrides())
        self.processor = EventProcessor(self.table.get, configs.for_agent)
        self.context = BatchContext(default_registry(), partition_for, 1 << 20, keys=keys)
        self.offset = 0

    def message(self, event, ring: KeyRing | None, key: bytes | None = None) -> Message:
        value = encode_event(event)
        self.offset += 1
        headers = ring.headers(value) if ring is not None else []
        run_key = key if key is not None else event.envelope.run_id.encode()
        return Message(TOPICS.events, 0, self.offset, run_key, value, headers)

    def batch(self, messages: list[Message]) -> BatchOutput:
        out = process_batch(messages, self.processor, self.context, TOPICS, now=1.7e9)
        self.table.update({write.key: write.state for write in out.state_writes})
        return out


def loop(run: Run, cycles: int) -> list:
    events = []
    for _ in range(cycles):
        events.append(run.make_call("read", {"path": "a.txt"}))
        events.append(run.make_result("read", {"path": "a.txt"}, text_result("same")))
    return events


def dead_letter_errors(out: BatchOutput) -> list[str]:
    return [
        decode_dead_letter(record.value).error
        for record in out.all_records()
        if record.topic == TOPICS.deadletter
    ]


def test_signed_events_guard_and_every_control_record_is_signed_for_its_gateway() -> None:
    worker = Worker()
    victim, other = (
        Run(run_id="v", gateway_id="gw-victim"),
        Run(run_id="o", gateway_id="gw-attacker"),
    )
    events = [(victim.make_start(), VICTIM), (other.make_start(), ATTACKER)]
    events += [(event, VICTIM) for event in loop(victim, 25)]
    events += [(event, ATTACKER) for event in loop(other, 2)]
    out = worker.batch([worker.message(event, ring) for event, ring in events])
    assert not dead_letter_errors(out)
    assert any(decision.action.value == "block" for decision in out.decisions)
    control = [record for record in out.all_records() if record.topic == TOPICS.control]
    watermark_gateways = []
    for record in control:
        message = decode_control(record.value)
        messages = message.marks if isinstance(message, RunWatermarks) else (message,)
        assert check_control(KEYS, record.headers, record.value, messages) == ""
        if isinstance(message, RunWatermarks):
            watermark_gateways.append({mark.gateway_id for mark in message.marks})
    # each watermark record holds one gateway's runs: each gateway can verify its own
    assert sorted(map(sorted, watermark_gateways)) == [["gw-attacker"], ["gw-victim"]]
    # the victim's decisions verify for the victim alone
    decision_record = next(r for r in control if r.key == b"v")
    assert VICTIM.check(decision_record.headers, decision_record.value) == ""
    assert ATTACKER.check(decision_record.headers, decision_record.value) != ""


def test_unsigned_forged_and_unknown_events_are_dead_lettered_not_applied() -> None:
    worker = Worker()
    victim = Run(run_id="v", gateway_id="gw-victim")
    worker.batch([worker.message(victim.make_start(), VICTIM)])
    calls = loop(victim, 3)
    unsigned = worker.message(calls[0], None)
    forged = worker.message(calls[1], ATTACKER)  # the victim's gateway id, another's key
    stranger = worker.message(Run(run_id="x", gateway_id="gw-x").make_start(), ATTACKER)
    out = worker.batch([unsigned, forged, stranger])
    assert out.dead_letter_kinds == {"unsigned_event": 1, "bad_signature": 1, "unknown_gateway": 1}
    errors = dead_letter_errors(out)
    assert errors[0].startswith("unsigned_event: event of gateway 'gw-victim' refused")
    assert worker.table[b"v"].last_seq == 1  # nothing applied to the victim's run
    assert not out.state_writes and not out.decisions


def test_another_gateway_cannot_touch_a_run_it_did_not_start() -> None:
    """The attacker signs with its own key but names the victim's run: 40 calls at the
    victim's next seqs and a RunEnded, all refused as foreign; the victim's own loop is then
    blocked exactly as without them."""
    plain, attacked = Worker(), Worker()
    blocks = {}
    for worker, attack in ((plain, False), (attacked, True)):
        victim = Run(run_id="v", gateway_id="gw-victim")
        worker.batch([worker.message(victim.make_start(), VICTIM)])
        if attack:
            intruder = Run(run_id="v", gateway_id="gw-attacker")
            intruder.seq = victim.seq
            injected = [intruder.make_call("read", {"path": "a.txt"}) for _ in range(40)]
            injected.append(intruder.make_end("completed"))
            out = worker.batch([worker.message(event, ATTACKER) for event in injected])
            assert out.dead_letter_kinds == {"foreign_run": 41}
            assert "belongs to gateway 'gw-victim'" in dead_letter_errors(out)[0]
            assert worker.table[b"v"].last_seq == 1 and worker.table[b"v"].gateway_id == "gw-victim"
        out = worker.batch([worker.message(event, VICTIM) for event in loop(victim, 25)])
        blocks[attack] = [
            (d.seq, d.action.value) for d in out.decisions if d.action.value != "warn"
        ]
    assert blocks[True] == blocks[False] and blocks[False]


def test_without_keys_a_run_still_belongs_to_its_gateway_and_unsigned_events_apply() -> None:
    worker = Worker(keys=None)
    victim = Run(run_id="v", gateway_id="gw-victim")
    out = worker.batch([worker.message(e, None) for e in [victim.make_start(), *loop(victim, 2)]])
    assert not dead_letter_errors(out) and worker.table[b"v"].last_seq == 5
    assert all(record.headers == () for record in out.all_records())
    intruder = Run(run_id="v", gateway_id="gw-other")
    intruder.seq = 5
    out = worker.batch([worker.message(intruder.make_end("completed"), None)])
    assert out.dead_letter_kinds == {"foreign_run": 1}


def test_a_rekeyed_event_keeps_its_signature() -> None:
    worker = Worker()
    victim = Run(run_id="v", gateway_id="gw-victim")
    message = worker.message(victim.make_start(), VICTIM, key=b"wrong-key")
    out = worker.batch([message])
    assert [rekey.key for rekey in out.rekeys] == [b"v"]
    assert VICTIM.check(out.rekeys[0].headers, out.rekeys[0].value) == ""


def command_message(
    worker: Worker,
    ring: KeyRing | None,
    command: str = "abort",
    scope: str = "run",
    run_id: str = "v",
) -> Message:
    """An operator's abort (or release) of run v, as `loopguard abort` sends it."""
    from streams.kafka.operator_commands import build_command
    from streams.wire.operator_codec import encode_command

    built = build_command(
        run_id,
        "agent",
        command,
        release_id=f"r{worker.offset}",
        reason="stop it",
        released_by="someone",
        calls=5 if command == "release" else None,
        scope=scope,
    )
    value = encode_command(built)
    worker.offset += 1
    headers = ring.headers(value) if ring is not None else []
    return Message(TOPICS.events, 0, worker.offset, run_id.encode(), value, headers)


def test_only_an_operator_key_may_abort_or_release_another_gateways_run() -> None:
    operator = KeyRing.of({"op1": "operator-secret-0123456789"})
    worker = Worker(GatewayKeys(KEYS.rings, operator))
    victim = Run(run_id="v", gateway_id="gw-victim")
    worker.batch([worker.message(victim.make_start(), VICTIM)])
    # a gateway may write the events topic: its abort of the victim's run is refused, and so
    # is the victim's own abort of its run sent for every run of its agent (--agent scope)
    refusals = [(None, "run"), (ATTACKER, "run"), (VICTIM, "agent")]
    for ring, scope in refusals:
        for command in ("abort", "release"):
            out = worker.batch([command_message(worker, ring, command, scope)])
            assert not out.decisions, (ring, scope, command)
            assert sum(out.dead_letter_kinds.values()) == 1
            assert "needs an operator key's signature" in dead_letter_errors(out)[0]
    assert worker.table[b"v"].status == "active"
    out = worker.batch([command_message(worker, operator)])
    assert [decision.action.value for decision in out.decisions] == ["abort"]
    (record,) = [r for r in out.all_records() if r.topic == TOPICS.control and r.key == b"v"]
    assert VICTIM.check(record.headers, record.value) == ""  # signed for the run's gateway
    # a keys file without operators takes no command at all
    bare = Worker()
    bare.batch([bare.message(victim.make_start(), VICTIM)])
    assert bare.batch([command_message(bare, operator)]).dead_letter_kinds == {
        "unsigned_command": 1
    }


def test_a_gateway_may_release_and_abort_its_own_run_only() -> None:
    """A held call's holdDefault (issue 43): the gateway that owns the run signs the command
    with its own key; the worker applies it to that run, and the same gateway's command for a
    run of another gateway's is refused."""
    operator = KeyRing.of({"op1": "operator-secret-0123456789"})
    with_operators = GatewayKeys(KEYS.rings, operator)
    for keys, refusal in ((with_operators, "bad_signature"), (KEYS, "unsigned_command")):
        worker = Worker(keys)
        victim, own = (
            Run(run_id="v", gateway_id="gw-victim"),
            Run(run_id="a", gateway_id="gw-attacker"),
        )
        starts = [worker.message(victim.make_start(), VICTIM)]
        starts.append(worker.message(own.make_start(), ATTACKER))
        worker.batch(starts)
        # the attacker's release and abort of the victim's run, signed with its own key
        for command in ("release", "abort"):
            out = worker.batch([command_message(worker, ATTACKER, command)])
            assert not out.decisions and out.dead_letter_kinds == {refusal: 1}
        assert worker.table[b"v"].status == "active"
        # its release of its own run applies, and so does its abort after it
        out = worker.batch([command_message(worker, ATTACKER, "release", run_id="a")])
        assert not dead_letter_errors(out)
        assert [(d.detector, d.action.value) for d in out.decisions] == [
            ("operator_release", "warn")
        ]
        out = worker.batch([command_message(worker, ATTACKER, "abort", run_id="a")])
        assert [d.action.value for d in out.decisions] == ["abort"]
        (record,) = [r for r in out.all_records() if r.topic == TOPICS.control and r.key == b"a"]
        assert ATTACKER.check(record.headers, record.value) == ""
        assert worker.table[b"a"].status != "active"
        # the victim's run is as it was
        assert worker.table[b"v"].status == "active"
