"""The gateway client's in-time wait against a real broker with no worker behind it.

Nothing answers, so every call misses its wait budget: fail-open lets the call run,
fail-closed refuses it, each miss is counted, and the log holds one warning per interval,
not one per call.
"""

from __future__ import annotations

import logging

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fail_mode", ["open", "closed"])
def test_no_worker_every_call_times_out_and_the_warning_is_throttled(
    pipeline_factory, tmp_path, caplog, fail_mode: str
) -> None:
    pipeline = pipeline_factory(f"sqlite:///{tmp_path / 'audit.db'}")
    client = pipeline.client(wait_budget_ms=20, fail_mode=fail_mode)
    run = client.start_run("agent-no-worker")
    with caplog.at_level(logging.WARNING, logger="loopguard.gateway"):
        verdicts = [run.before_tool("read", {"path": f"f{n}"}) for n in range(12)]
    assert all(v.timed_out for v in verdicts)
    assert all(v.allowed is (fail_mode == "open") for v in verdicts)
    if fail_mode == "closed":
        assert verdicts[0].reason == "loopguard did not answer within 20 ms"
    assert client.wait_timeouts == 12
    lines = [r for r in caplog.records if "had not processed" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]  # 12 calls in well under 10 s
    assert f"failing {fail_mode}" in lines[0].getMessage()


def test_no_worker_wait_processed_times_out_saying_how_far_the_worker_got(
    pipeline_factory, tmp_path
) -> None:
    pipeline = pipeline_factory(f"sqlite:///{tmp_path / 'audit.db'}")
    client = pipeline.client()
    run = client.start_run("agent-no-worker")
    run.before_tool("read", {"path": "f"})
    with pytest.raises(TimeoutError, match=r"processed up to seq 0, not 2, in 0.3s"):
        client.wait_processed(run.run_id, run.seq, timeout=0.3)
