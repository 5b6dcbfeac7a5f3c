"""Loop incidents' pure logic (issue 28): signatures, windows, thresholds, closing, config."""

from __future__ import annotations

import itertools

import pytest

from streams.core.config import ConfigError, resolve
from streams.core.events import Action, Decision, Envelope, ToolResult
from streams.core.fleet import fleet_from_document
from streams.core.incident_config import IncidentConfig
from streams.core.incidents import (
    ARGS,
    CLOSED,
    CYCLE,
    ERROR,
    OPEN,
    Incident,
    IncidentBook,
    Signal,
    decision_signal,
    failure_signal,
    incident_id,
    normalise_error,
    window_start,
)

CONFIG = IncidentConfig(enabled=True, window_seconds=60, min_runs=3, min_agents=2)
T0 = 1_700_000_040_000  # a window start for 60 s windows


def result(run: str, agent: str, error: str | None, at: int = T0) -> ToolResult:
    return ToolResult(Envelope(run, agent, "gw", 1, at), "web_fetch", "{}", None, error)


def signal(run: str, agent: str, at: int = T0, detail: str = "upstream <n>") -> Signal:
    return Signal("web_fetch", ERROR, detail, run, agent, at)


def decision(**kw) -> Decision:
    values = dict(
        run_id="r1",
        agent_id="a1",
        gateway_id="gw",
        seq=3,
        event_time=T0,
        action=Action.BLOCK,
        detector="generic_repeat",
        severity="critical",
        count=20,
        tool_name="process",
        reason="loop",
        args_hash="process:abc",
        result_hash="def",
    )
    values.update(kw)
    return Decision(**values)


# -- normalisation and signatures --------------------------------------------------------


def test_errors_differing_only_in_ids_times_and_paths_normalise_alike():
    a = "Upstream 503 for req_8f2a91 at 2026-12-04T23:10:05.123Z (/srv/app/a.py)"
    b = "upstream 503 for REQ_11B0FF at 2026-12-05T01:00:00Z (/opt/other/b.py)"
    assert normalise_error(a) == normalise_error(b) == "upstream <n> for <id> at <ts> (<path>)"
    assert normalise_error("session 0a1b2c3d4e5f not found") == "session <hex> not found"
    uuid = "run 550e8400-e29b-41d4-a716-446655440000 gone"
    assert normalise_error(uuid) == "run <id> gone"
    spaced = "timeout   after\n30s on https://x.io/v1?q=2"
    assert normalise_error(spaced) == "timeout after <id> on <url>"
    # an id whose random part starts with letters or with digits normalises alike
    assert normalise_error("req_abcdef12 failed") == normalise_error("req_0a1b2c3d failed")
    assert normalise_error("req_abcdef12 failed") == "<id> failed"
    assert normalise_error("permission denied") != normalise_error("file not found")


def test_failed_results_sign_by_tool_and_normalised_error():
    one = failure_signal(result("r1", "a1", "HTTP 500 for id 77"))
    two = failure_signal(result("r2", "a2", "HTTP 500 for id 12345"))
    assert one is not None and two is not None
    assert one.signature == two.signature and one.kind == ERROR
    assert failure_signal(result("r3", "a1", None)) is None  # succeeded: no signal


def test_decisions_sign_by_args_hash_unless_the_call_failed():
    sig = decision_signal(decision())
    assert sig is not None and (sig.kind, sig.detail) == (ARGS, "process:abc")
    assert decision_signal(decision(result_hash="error:123")) is None
    assert decision_signal(decision(detector="error_repeat")) is None
    assert decision_signal(decision(args_hash="")) is None


def test_incident_ids_are_derived_from_signature_and_window():
    assert incident_id("s", 1) == incident_id("s", 1)
    assert incident_id("s", 1) != incident_id("s", 2) != incident_id("t", 1)


# -- windows and thresholds ---------------------------------------------------------------


def test_runs_and_agents_crossing_the_thresholds_in_one_window_open_one_incident():
    book = IncidentBook(CONFIG)
    assert book.observe(signal("r1", "a1", T0 + 1)) == []
    assert book.observe(signal("r2", "a1", T0 + 2)) == []  # 2 runs, 1 agent
    assert book.observe(signal("r2", "a1", T0 + 3)) == []  # same run again counts once
    (opened,) = book.observe(signal("r3", "a2", T0 + 4))
    assert opened.status == OPEN and opened.opened_at == T0
    assert opened.runs == ("r1", "r2", "r3") and opened.agents == ("a1", "a2")
    assert opened.incident_id == incident_id(opened.signature, T0)
    assert book.observe(signal("r3", "a2", T0 + 5)) == []  # nothing new: nothing published
    (grown,) = book.observe(signal("r4", "a3", T0 + 6))
    assert grown.incident_id == opened.incident_id and "r4" in grown.runs


def test_enough_runs_of_one_agent_is_not_an_incident():
    book = IncidentBook(CONFIG)
    for n in range(10):
        assert book.observe(signal(f"r{n}", "a1", T0 + n)) == []


def test_signals_split_across_windows_do_not_add_up():
    book = IncidentBook(CONFIG)
    book.observe(signal("r1", "a1", T0 + 59_000))
    book.observe(signal("r2", "a2", T0 + 59_500))
    assert book.observe(signal("r3", "a2", T0 + 60_000)) == []  # the next window
    assert book.incidents() == []


def test_different_signatures_are_counted_apart():
    book = IncidentBook(CONFIG)
    book.observe(signal("r1", "a1", detail="x"))
    book.observe(signal("r2", "a2", detail="y"))
    assert book.observe(signal("r3", "a2", detail="z")) == []


def test_disabled_config_opens_nothing():
    book = IncidentBook(IncidentConfig(enabled=False, min_runs=1, min_agents=1))
    assert book.observe(signal("r1", "a1")) == []


# -- closing -----------------------------------------------------------------------------


def opened_book() -> tuple[IncidentBook, Incident]:
    book = IncidentBook(CONFIG)
    for run, agent in (("r1", "a1"), ("r2", "a1"), ("r3", "a2")):
        book.observe(signal(run, agent, T0 + 10))
    (incident,) = book.incidents()
    return book, incident


def test_an_incident_closes_at_the_end_of_its_first_quiet_window():
    book, incident = opened_book()
    assert incident.closes_at == T0 + 120_000
    assert book.close_due(T0 + 119_999) == []
    (closed,) = book.close_due(T0 + 120_000)
    assert closed.status == CLOSED and closed.closed_at == T0 + 120_000
    assert closed.incident_id == incident.incident_id and book.open == {}


def test_a_signal_in_the_next_window_keeps_it_open():
    book, incident = opened_book()
    book.observe(signal("r1", "a1", T0 + 70_000))  # next window: still looping
    assert book.close_due(T0 + 120_000) == []
    (closed,) = book.close_due(T0 + 180_000)
    assert closed.closed_at == T0 + 180_000


def test_a_signal_after_a_quiet_window_closes_the_old_incident_first():
    book, first = opened_book()
    later = T0 + 300_000
    published = book.observe(signal("r9", "a9", later))
    assert [(i.incident_id, i.status) for i in published] == [(first.incident_id, CLOSED)]
    for run, agent in (("r7", "a7"), ("r8", "a8")):
        book.observe(signal(run, agent, later))
    ids = [i.incident_id for i in book.incidents()]
    assert ids == [first.incident_id, incident_id(first.signature, later)]


# -- order within a window ---------------------------------------------------------------


def test_the_order_of_signals_within_a_window_never_changes_the_incidents():
    signals = [
        signal("r1", "a1", T0 + 5),
        signal("r2", "a2", T0 + 1),
        signal("r3", "a1", T0 + 9),
        signal("r4", "a3", T0 + 2),
        signal("r4", "a3", T0 + 70_000),
    ]
    seen = set()
    for order in itertools.permutations(signals[:4]):
        book = IncidentBook(CONFIG)
        for sig in (*order, signals[4]):
            book.observe(sig)
        book.close_due(T0 + 10**9)
        seen.add(tuple(book.incidents()))
    assert len(seen) == 1
    (incident,) = seen.pop()
    assert incident.runs == ("r1", "r2", "r3", "r4") and incident.status == CLOSED


def test_records_round_trip_through_dicts():
    _, incident = opened_book()
    assert Incident.from_dict(incident.to_dict()) == incident
    sig = signal("r1", "a1")
    assert Signal.from_dict(sig.to_dict()) == sig
    assert window_start(T0 + 59_999, 60_000) == T0


# -- config ------------------------------------------------------------------------------


def test_incidents_config_defaults_off_and_keeps_the_default_version():
    assert resolve({}).incidents == IncidentConfig()
    assert resolve({}).version == "3820b3802a3991bc"
    assert resolve({"incidents": {"enabled": False}}).version == "3820b3802a3991bc"
    on = resolve({"incidents": {"enabled": True, "windowSeconds": 30, "minRuns": 6}})
    assert on.incidents == IncidentConfig(True, 30, 6, 2)
    assert on.version != resolve({}).version


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"incidents": []}, "tools.loopDetection.incidents: expected an object"),
        ({"incidents": {"minRun": 3}}, 'did you mean "minRuns"'),
        ({"incidents": {"minAgents": 0}}, "incidents.minAgents: expected a whole number >= 1"),
        ({"incidents": {"enabled": "yes"}}, "incidents.enabled: expected true or false"),
        ({"incidents": {"windowSeconds": 10**6}}, "must be at most 86400"),
    ],
)
def test_bad_incidents_blocks_are_refused_naming_the_field(block, message):
    with pytest.raises(ConfigError, match=message):
        resolve(block)


def test_the_fleet_reads_incidents_from_the_global_block_only():
    doc = {"tools": {"loopDetection": {"incidents": {"enabled": True, "minRuns": 4}}}}
    assert fleet_from_document(doc).incidents == IncidentConfig(True, 300, 4, 2)
    agent = {"agents": {"list": [{"id": "x", "tools": {"loopDetection": {"incidents": {}}}}]}}
    with pytest.raises(ConfigError, match="incidents are fleet-wide"):
        fleet_from_document(agent)
    with pytest.raises(ConfigError, match="incidents are fleet-wide"):
        fleet_from_document({}).with_agent("x", {"incidents": {"enabled": True}})


# -- labels ------------------------------------------------------------------------------


def test_every_incident_has_a_human_label() -> None:
    _, incident = opened_book()
    assert incident.label == "web_fetch fails: upstream <n>"
    repeated = Incident("i", "s", "process", ARGS, "process:" + "ab12" * 16, OPEN, 60, T0, T0)
    assert repeated.label == "process called again and again with the same args (ab12ab12ab12)"
    cycle = decision_signal(
        decision(
            detector="agent_cycle",
            tool_name="sessions_send",
            extra={"agents": '["reviewer", "planner", "researcher"]'},
        )
    )
    assert cycle is not None and (cycle.kind, cycle.detail) == (
        CYCLE,
        "planner → researcher → reviewer",
    )
    looped = Incident("i", "s", "sessions_send", CYCLE, cycle.detail, OPEN, 60, T0, T0)
    assert looped.label == (
        "agents planner → researcher → reviewer → planner pass the same messages round"
    )
