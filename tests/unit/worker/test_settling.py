"""Settling rounds (exactly once, immediate control delivery): what a round sends, acks and
commits, and in which order, and what a rebalance waits for; no broker, no Faust."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.service.records import OutRecord
from streams.worker import checkpoint as checkpoint_module
from streams.worker.checkpoint import Checkpoint
from streams.worker.settling import Settling

CHANGELOG = ("lg-runs-changelog", 2)


def state(n: int) -> OutRecord:
    return OutRecord(CHANGELOG[0], b"run-a", f"state {n}".encode(), CHANGELOG[1], ("ev", 2))


class Log:
    """What the settling did, in order; commits can be held to let batches queue."""

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self.failures: list[BaseException] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def send(self, records: Any) -> None:
        self.entries.append(("send", [r.value for r in records.get(CHANGELOG, [])]))

    async def commit(self) -> None:
        await self.hold.wait()
        self.entries.append(("commit",))

    def ack(self, n: int) -> Any:
        async def ack() -> None:
            self.entries.append(("ack", n))

        return ack

    def settling(self, limit: int = 64) -> Settling:
        return Settling(self.send, self.commit, self.failures.append, limit)


def delivered() -> list[asyncio.Future]:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return [done]


def test_batches_queued_during_a_commit_settle_together_in_order_with_one_commit() -> None:
    log = Log()

    async def scenario() -> None:
        settling = log.settling()
        log.hold.clear()  # the first round's commit waits
        await settling.add(delivered(), {CHANGELOG: [state(1)]}, log.ack(1))
        for _ in range(5):
            await asyncio.sleep(0)
        await settling.add(delivered(), {CHANGELOG: [state(2)]}, log.ack(2))
        await settling.add(delivered(), {CHANGELOG: [state(3)]}, log.ack(3))
        log.hold.set()
        await settling.settled()

    asyncio.run(scenario())
    assert log.entries == [
        ("send", [b"state 1"]),
        ("ack", 1),
        ("commit",),
        ("send", [b"state 2", b"state 3"]),  # one round: a run's newer state after its older
        ("ack", 2),
        ("ack", 3),
        ("commit",),
    ]


def test_an_undelivered_decision_stops_the_round_before_its_state_acks_and_commit() -> None:
    log = Log()
    raised: list[BaseException] = []

    async def scenario() -> None:
        settling = log.settling()
        refused = asyncio.get_running_loop().create_future()
        refused.set_exception(RuntimeError("NotEnoughReplicas"))
        await settling.add([refused], {CHANGELOG: [state(1)]}, log.ack(1))
        await settling.settled()
        try:
            await settling.add(delivered(), {CHANGELOG: [state(2)]}, log.ack(2))
        except RuntimeError as exc:
            raised.append(exc)

    asyncio.run(scenario())
    assert log.entries == []  # no state sent, nothing acked or committed
    assert [str(e) for e in log.failures] == ["NotEnoughReplicas"]
    assert [str(e) for e in raised] == ["NotEnoughReplicas"]  # the agent stops too


def test_the_agent_waits_only_while_a_full_queue_is_not_yet_taken() -> None:
    log = Log()
    added: list[int] = []

    async def scenario() -> None:
        settling = log.settling(limit=2)
        log.hold.clear()

        async def agent() -> None:
            for n in range(1, 6):
                await settling.add(delivered(), {CHANGELOG: [state(n)]}, log.ack(n))
                added.append(n)

        task = asyncio.ensure_future(agent())
        for _ in range(20):
            await asyncio.sleep(0)
        # 1 and 2 filled the queue; round 1 took them and waits in its commit; 3 and 4
        # filled it again; 5 waits for a round to take them
        stuck = list(added)
        log.hold.set()
        await task
        await settling.settled()
        added.append(-1)
        assert stuck == [1, 2, 3, 4]

    asyncio.run(scenario())
    assert [e[1] for e in log.entries if e[0] == "ack"] == [1, 2, 3, 4, 5]


def rebalancing_checkpoint(settling: Settling) -> Checkpoint:
    """A Checkpoint as a rebalance finds it: only its settling matters here."""
    checkpoint = object.__new__(Checkpoint)
    checkpoint.settling = settling
    return checkpoint


def test_a_revoked_worker_rejoins_only_once_its_batches_are_committed() -> None:
    """Left running past the rejoin, a commit raced the partition's new owner, whose
    producer fences ours (ProducerFenced: the worker crashed)."""
    log = Log()

    async def scenario() -> list[Any]:
        settling = log.settling()
        log.hold.clear()  # the round's commit is under way when the rebalance comes
        await settling.add(delivered(), {CHANGELOG: [state(1)]}, log.ack(1))
        asyncio.get_running_loop().call_later(0.05, log.hold.set)
        await rebalancing_checkpoint(settling).settle_before_rejoining(None, set())
        return list(log.entries)

    assert asyncio.run(scenario()) == [("send", [b"state 1"]), ("ack", 1), ("commit",)]


def test_a_commit_that_hangs_lets_the_worker_rejoin_after_the_bound(monkeypatch, caplog) -> None:
    monkeypatch.setattr(checkpoint_module, "REJOIN_SETTLE_SECONDS", 0.05)
    log = Log()

    async def scenario() -> list[Any]:
        settling = log.settling()
        log.hold.clear()  # never released: a broker that stopped answering
        await settling.add(delivered(), {CHANGELOG: [state(1)]}, log.ack(1))
        await rebalancing_checkpoint(settling).settle_before_rejoining(None, set())
        entries = list(log.entries)
        assert settling.rounds is not None
        settling.rounds.cancel()
        return entries

    assert asyncio.run(scenario()) == [("send", [b"state 1"]), ("ack", 1)]
    assert "rejoining the group without them" in caplog.text


def test_each_committed_round_reports_its_seconds_and_a_failed_one_nothing(monkeypatch) -> None:
    """The worker's loopguard_settle_round_seconds: a round's time from taking its batches to
    its commit, reported once it committed."""
    clock = [100.0]
    monkeypatch.setattr("streams.worker.settling.monotonic", lambda: clock[0])
    log = Log()
    rounds: list[float] = []

    async def commit() -> None:
        clock[0] += 0.25  # the transaction's commit takes a quarter of a second
        await log.commit()

    async def scenario() -> None:
        settling = Settling(log.send, commit, log.failures.append, on_round=rounds.append)
        await settling.add(delivered(), {CHANGELOG: [state(1)]}, log.ack(1))
        await settling.settled()
        await settling.add(delivered(), {CHANGELOG: [state(2)]}, log.ack(2))
        await settling.settled()
        refused = asyncio.get_running_loop().create_future()
        refused.set_exception(RuntimeError("NotEnoughReplicas"))
        await settling.add([refused], {CHANGELOG: [state(3)]}, log.ack(3))
        await settling.settled()

    asyncio.run(scenario())
    assert rounds == [0.25, 0.25]  # the third round failed: not reported
    assert [str(e) for e in log.failures] == ["NotEnoughReplicas"]
