"""The worker's HTTP API (``loopguard worker --web-port``) against a real worker, on SQLite and
PostgreSQL: the JSON endpoints answer exactly what the audit store (and the CLI) answer, and
the status page groups runs with every value escaped, the run page shows a run's timeline, and
/metrics answers in Prometheus' format."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from urllib.parse import quote, urlencode

import pytest
from services import ENABLED
from test_pipeline import drive_ping_pong, expected_decisions, wait_for_audit

from streams.cli.main import main
from streams.core.events import Action, Decision
from streams.devtools.embedded_broker import free_port

pytestmark = pytest.mark.integration

ODD_RUN = 'odd run <b>&"x"'
XSS = "<script>alert('loop')</script>"


def get(url: str, timeout: float = 10.0) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return (
                response.status,
                response.headers.get("Content-Type", ""),
                response.read().decode(),
            )
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def wait_for_web(base: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if get(f"{base}/healthz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"web server at {base} did not come up")
        time.sleep(0.2)


def summary_json(summary, usage: dict | None = None) -> dict:
    data = asdict(summary)
    data["worst_action"] = data["worst_action"].value
    data["usage"] = usage  # issue 28: null for a run whose gateway reports no usage
    return data


def cli_json(capsys, *args: str):
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.fixture
def web_pipeline(pipeline_factory, migrated_db_url):
    pipeline = pipeline_factory(migrated_db_url, config=ENABLED)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client()
    try:
        pipeline.wait_ready(client)
        wait_for_web(f"http://127.0.0.1:{port}")
    except Exception:
        print(pipeline.worker_logs())
        raise
    return pipeline, client, f"http://127.0.0.1:{port}"


def wait_for_progress(pipeline, run_id: str, last_seq: int, timeout: float = 30.0) -> None:
    """Until the run's progress row counts its last event: a run's status can be final (aborted)
    before its last event (RunEnded) is processed, so waiting for the status alone is not enough."""
    deadline = time.monotonic() + timeout
    with pipeline.store() as store:
        while True:
            summary = next((s for s in store.runs(limit=10_000) if s.run_id == run_id), None)
            if summary is not None and summary.last_seq == last_seq:
                return
            assert time.monotonic() < deadline, f"progress of {run_id}: {summary}"
            time.sleep(0.1)


def test_http_api(web_pipeline, capsys) -> None:
    pipeline, client, base = web_pipeline
    run = client.start_run("coder")
    assert drive_ping_pong(run, client)
    run.end()
    expected = expected_decisions(run.events)
    assert len(wait_for_audit(pipeline, run.run_id, len(expected))) == len(expected)
    # The run's progress row lands after its decisions: wait for it, or the answers compared
    # below can differ by a row the audit agent writes between two of them.
    wait_for_progress(pipeline, run.run_id, run.seq)
    odd = Decision(
        run_id=ODD_RUN,
        agent_id="<i>agent</i>",
        gateway_id="gw&1",
        seq=3,
        event_time=int(time.time() * 1000),
        action=Action.WARN,
        detector="generic_repeat",
        severity="warning",
        count=10,
        tool_name="exec",
        reason=XSS,
    )
    with pipeline.store() as store:
        store.record_decisions([odd])

    status, ctype, body = get(f"{base}/healthz")
    assert status == 200 and ctype.startswith("application/json")
    health = json.loads(body)
    assert health["status"] == "ok" and health["db"] == "ok"
    assert health["app_id"] == pipeline.prefix

    db = pipeline.db_url
    with pipeline.store() as store:
        queries = [
            ({}, {}),
            ({"agent": "coder"}, {"agent": "coder"}),
            ({"gateway": "gw-test"}, {"gateway": "gw-test"}),
            (
                {"detector": "ping_pong", "severity": "critical"},
                {"detector": "ping_pong", "severity": "critical"},
            ),
            ({"limit": "1"}, {"limit": 1}),
            (
                {"since": str(expected[0].event_time), "until": str(expected[-1].event_time)},
                {"since_ms": expected[0].event_time, "until_ms": expected[-1].event_time},
            ),
        ]
        for params, kwargs in queries:
            status, ctype, body = get(f"{base}/runs?{urlencode(params)}")
            assert status == 200 and ctype.startswith("application/json"), body
            answer = json.loads(body)
            runs = store.runs(**{"limit": 50, **kwargs})
            usage = store.run_usage(s.run_id for s in runs)
            assert answer == [summary_json(s, usage.get(s.run_id)) for s in runs]
            flags = [f"--{k}={v}" for k, v in params.items()]
            # --all: the API lists the readiness run (agent loopguard-canary) the CLI hides.
            listed = cli_json(capsys, "runs", "--db", db, "--json", "--all", *flags).splitlines()
            assert answer == [json.loads(line) for line in listed]  # JSON lines
        assert {r["run_id"] for r in json.loads(get(f"{base}/runs")[2])} >= {run.run_id, ODD_RUN}

        for run_id in (run.run_id, ODD_RUN, "no-such-run"):
            status, _, body = get(f"{base}/runs/{quote(run_id, safe='')}/history")
            assert status == 200, body
            answer = json.loads(body)
            assert answer == [d.to_dict() for d in store.history(run_id)]
            if run_id == "no-such-run":  # the CLI says the trail does not know the run
                assert main(["history", run_id, "--db", db, "--json"]) == 1
                assert capsys.readouterr().out == ""
                continue
            lines = cli_json(capsys, "history", run_id, "--db", db, "--json").splitlines()
            assert answer == [json.loads(line) for line in lines]
    # ... and that is what the core decided for the run's events.
    assert json.loads(get(f"{base}/runs/{run.run_id}/history")[2]) == [
        d.to_dict() for d in sorted(expected, key=lambda d: d.seq)
    ]

    for bad, why in [
        ("limit=abc", "limit: expected a whole number"),
        ("limit=-1", "limit: must be between 0"),
        ("severity=bogus", "severity: expected one of warning, critical"),
        ("agnet=coder", "unknown query parameter 'agnet'"),
        ("since=yesterday", "since: expected a whole number"),
    ]:
        status, ctype, body = get(f"{base}/runs?{bad}")
        assert status == 400 and ctype.startswith("application/json"), (bad, body)
        assert why in json.loads(body)["error"]

    status, ctype, page = get(f"{base}/status")
    assert status == 200 and ctype.startswith("text/html")
    assert f'data-run="{run.run_id}"' in page  # one line per run
    assert page.count(f'data-run="{run.run_id}"') == 1
    assert "&lt;script&gt;alert(&#x27;loop&#x27;)&lt;/script&gt;" in page
    assert XSS not in page and "<i>agent</i>" not in page and "<b>&" not in page
    assert "odd run &lt;b&gt;&amp;&quot;x&quot;" in page
    assert 'href="/status/run?id=odd+run+%3Cb%3E%26%22x%22"' in page
    assert 'id="decisions-chart"' in page and 'class="bar abort"' in page
    assert get(f"{base}/status?limit=0")[0] == 400

    # the run page: the run's decisions in the order it produced them
    status, _, page = get(f"{base}/status/run?{urlencode({'id': run.run_id})}")
    assert status == 200
    seqs = [int(s) for s in re.findall(r'<tr class="decision \w+"><td class="num">(\d+)<', page)]
    assert seqs == sorted(d.seq for d in expected)
    assert "not written to the database" in page  # says what the trail does not hold
    status, _, page = get(f"{base}/status/run?{urlencode({'id': ODD_RUN})}")
    assert status == 200 and XSS not in page and "&lt;i&gt;agent&lt;/i&gt;" in page

    # Prometheus metrics from the same web server
    status, ctype, text = get(f"{base}/metrics")
    assert status == 200 and ctype == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE loopguard_decisions_total counter" in text
    decided = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("loopguard_decisions_total{")
    )
    # zero until the worker reports its decisions to WorkerMetrics; then at least this run's
    assert decided == 0 or decided >= len(expected)
