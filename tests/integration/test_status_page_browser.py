"""The status page in a real browser: headless Chromium (Debian's package) driven by Playwright,
against a real worker's web server fed by real loops through the gateway client.

Checked: every page loads with no console error, no failed request and no script of the
trail's; the filters change the rows; the chart renders bars; the run page shows the run's
timeline. Screenshots go to ``$LOOPGUARD_ARTEFACTS`` (default ``tests/artefacts/``, ignored by
git). ``LOOPGUARD_UPDATE_DOCS_SCREENSHOT=1`` runs one more test that drives a small fleet for
about a minute and saves the README's ``docs/status-page.png``.

Needs ``/usr/bin/chromium`` (``apt-get install chromium``; override with
``LOOPGUARD_CHROMIUM``) and the ``playwright`` package; Playwright's own browser download is
never used. Without them the test is skipped, unless ``LOOPGUARD_REQUIRE_BROWSER=1`` (CI),
where it fails instead.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from services import ENABLED
from test_pipeline import drive_ping_pong, expected_decisions, wait_for_audit
from test_web import wait_for_web

from streams.audit.canary import CANARY_AGENT
from streams.audit.store import AuditStore
from streams.devtools.embedded_broker import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LOOPGUARD_CHROMIUM", "/usr/bin/chromium")
ARTEFACTS = Path(os.environ.get("LOOPGUARD_ARTEFACTS") or ROOT / "tests" / "artefacts")
DOCS_SCREENSHOT = ROOT / "docs" / "status-page.png"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE_AGENT = "<script>window.__owned=1</script><img src=x onerror=alert(1)>"


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def chromium_available() -> None:
    why = _browser_missing()
    if why is None:
        return
    if os.environ.get("LOOPGUARD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser required (LOOPGUARD_REQUIRE_BROWSER=1) but {why}", pytrace=False)
    pytest.skip(why)


class Browser:
    """One fresh Chromium profile; records console errors, page errors and failed requests."""

    def __init__(self, playwright: Any, profile: Path) -> None:
        self.context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
            timezone_id="UTC",
        )
        self.problems: list[str] = []
        self.page = self.context.pages[0] if self.context.pages else self.context.new_page()
        page = self.page
        page.set_default_timeout(20_000)
        page.on(
            "console",
            lambda m: (
                self.problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning")
                else None
            ),
        )
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        page.on(
            "response",
            lambda r: (
                self.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None
            ),
        )

    def goto(self, url: str) -> Any:
        response = self.page.goto(url, wait_until="load")
        assert response is not None and response.ok, url
        return response

    def shot(self, name: str) -> Path:
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def rows(self) -> list[str]:
        return self.page.eval_on_selector_all(
            "#runs tr.run", "rows => rows.map(r => r.getAttribute('data-run'))"
        )

    def assert_clean(self) -> None:
        assert self.problems == [], self.problems
        # the page runs exactly one script: ours; nothing from the trail was executed
        assert self.page.evaluate("document.scripts.length") == 1
        assert self.page.evaluate("window.__owned === undefined")


@pytest.fixture
def browser(chromium_available: None, tmp_path: Path) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        running = Browser(playwright, tmp_path / "chromium-profile")
        try:
            yield running
        finally:
            running.context.close()


def settle(pipeline, quiet: float = 1.5, timeout: float = 30.0) -> None:
    """Wait until the audit trail stops growing (the readiness canary's decisions too)."""
    deadline = time.monotonic() + timeout
    with pipeline.store() as store:
        last, since = store.decision_count(), time.monotonic()
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            time.sleep(0.2)
            now = store.decision_count()
            if now != last:
                last, since = now, time.monotonic()


@pytest.fixture
def loops(chromium_available: None, pipeline_factory, tmp_path: Path):
    """A worker with its web port, and two real runs: one aborted, one from a hostile agent."""
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    pipeline = pipeline_factory(db_url, config=ENABLED)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client()
    base = f"http://127.0.0.1:{port}"
    try:
        pipeline.wait_ready(client)
        wait_for_web(base)
        aborted = client.start_run("coder")
        assert drive_ping_pong(aborted, client), "the run was never aborted"
        aborted.end()
        hostile = client.start_run(HOSTILE_AGENT)
        drive_ping_pong(hostile, client, cycles=14)  # long enough for a warning or two
        hostile.end()
        for run in (aborted, hostile):
            expected = len(expected_decisions(run.events))
            assert expected and len(wait_for_audit(pipeline, run.run_id, expected)) == expected
        settle(pipeline)
    except Exception:
        print(pipeline.worker_logs())
        raise
    with pipeline.store() as store:
        history = {run.run_id: store.history(run.run_id) for run in (aborted, hostile)}
        # The page leaves out the readiness canary's test loop, as `loopguard runs` does.
        shown = store.runs(limit=None, exclude_agents=(CANARY_AGENT,))
        everything = sum(r.decisions for r in shown)
        aborted_runs = {r.run_id for r in shown if r.abort}
        assert store.decision_count() > everything  # the canary's are in the trail
    return base, aborted.run_id, hostile.run_id, history, everything, aborted_runs


def test_status_page_in_chromium(browser: Browser, loops) -> None:
    base, aborted, hostile, history, everything, aborted_runs = loops
    page = browser.page

    # --- the page loads: health cards, runs, chart; nothing broken, nothing injected
    browser.goto(f"{base}/status?refresh=0")
    assert page.title() == "loopguard status"
    assert page.inner_text("#db-state") == "ok"
    assert page.inner_text("#worker-state") == "ok"
    assert set(browser.rows()) >= {aborted, hostile}
    assert browser.rows().count(aborted) == 1  # one line per run, however many decisions
    row = page.locator(f'tr.run[data-run="{aborted}"]')
    assert row.locator(".badge").inner_text().lower() == "abort"
    agent_cell = page.locator(f'tr.run[data-run="{hostile}"] td:nth-child(3)')
    assert agent_cell.inner_text() == HOSTILE_AGENT  # shown as text, not markup
    assert page.evaluate("document.querySelectorAll('#runs img').length") == 0

    # --- the chart renders: an SVG with bars of a real size, one colour per action
    chart = page.locator("#decisions-chart")
    box = chart.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 100
    bars = page.locator("#decisions-chart rect.bar")
    assert bars.count() > 0
    for i in range(bars.count()):
        bar = bars.nth(i).bounding_box()
        assert bar is not None and bar["height"] > 0 and bar["width"] > 0
    drawn = {
        cls.split()[1]
        for cls in page.eval_on_selector_all(
            "#decisions-chart rect.bar", "bars => bars.map(b => b.getAttribute('class'))"
        )
    }
    assert drawn >= {d.action.value for ds in history.values() for d in ds}
    total = sum(
        int(n)
        for n in page.eval_on_selector_all(
            "#decisions-chart rect.bar", "bars => bars.map(b => b.dataset.count)"
        )
    )
    assert total == everything  # every decision in the trail is in a bar, but the canary's
    assert "of loopguard-canary hidden" in page.inner_text("#runs-count")
    browser.shot("status-page")
    browser.assert_clean()

    # --- filters change the rows: a <select> applies at once (status.js) ...
    with page.expect_navigation():
        page.select_option("#f-action", "abort")
    query = parse_qs(urlparse(page.url).query)
    assert query["action"] == ["abort"]
    assert "agent" not in query and "detector" not in query  # empty filters left out
    assert aborted in aborted_runs and hostile not in aborted_runs
    assert sorted(browser.rows()) == sorted(aborted_runs)
    assert page.locator("#f-action").input_value() == "abort"
    browser.shot("status-page-abort-only")
    browser.assert_clean()

    # ... a text filter with Enter; the hostile agent id round-trips through the URL
    browser.goto(f"{base}/status?refresh=0")
    page.fill("#f-agent", HOSTILE_AGENT)
    with page.expect_navigation():
        page.press("#f-agent", "Enter")
    assert parse_qs(urlparse(page.url).query)["agent"] == [HOSTILE_AGENT]
    assert browser.rows() == [hostile]
    assert page.locator("#top-agents li").count() == 1
    browser.shot("status-page-hostile-agent")
    browser.assert_clean()

    # ... and an agent nobody has
    browser.goto(f"{base}/status?{urlencode({'agent': 'nobody', 'refresh': 0})}")
    assert browser.rows() == []
    assert "no loop decisions match" in page.inner_text("#runs")

    # --- a bar links to its own time range
    browser.goto(f"{base}/status?refresh=0")
    with page.expect_navigation():
        page.locator("#decisions-chart a").first.click()
    zoomed = parse_qs(urlparse(page.url).query)
    assert "since" in zoomed and "until" in zoomed
    assert browser.rows(), "the first bar's range holds at least one run"
    browser.assert_clean()

    # --- the run page: the run's timeline from the audit trail
    browser.goto(f"{base}/status?refresh=0")
    with page.expect_navigation():
        page.locator(f'tr.run[data-run="{aborted}"] td.id a').first.click()
    assert urlparse(page.url).path == "/status/run"
    assert page.inner_text("#run-id") == aborted
    expected = history[aborted]
    seqs = page.eval_on_selector_all(
        "#timeline tr.decision", "rows => rows.map(r => Number(r.cells[0].textContent))"
    )
    assert seqs == [d.seq for d in expected]  # in the order the run produced them
    actions = page.eval_on_selector_all(
        "#timeline tr.decision .badge", "cells => cells.map(c => c.textContent.toLowerCase())"
    )
    assert actions == [d.action.value for d in expected]
    assert page.locator("#seq-strip circle.mark").count() == len(expected)
    assert "not written to the database" in page.inner_text("#trail-note")
    browser.shot("run-page")
    browser.assert_clean()

    # the hostile run's page escapes too
    browser.goto(f"{base}/status/run?{urlencode({'id': hostile})}")
    assert HOSTILE_AGENT in page.inner_text("#run-summary")
    browser.shot("run-page-hostile-agent")
    browser.assert_clean()


@pytest.mark.skipif(
    os.environ.get("LOOPGUARD_UPDATE_DOCS_SCREENSHOT") != "1",
    reason="refreshes docs/status-page.png only with LOOPGUARD_UPDATE_DOCS_SCREENSHOT=1",
)
def test_docs_screenshot(browser: Browser, pipeline_factory, tmp_path: Path) -> None:
    """A few agents looping over about a minute, as the README shows the page."""
    db_url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(db_url) as store:
        store.migrate()
    pipeline = pipeline_factory(db_url, config=ENABLED)
    port = free_port()
    pipeline.start_worker(web_port=port)
    client = pipeline.client()
    base = f"http://127.0.0.1:{port}"
    pipeline.wait_ready(client)
    wait_for_web(base)
    plan = [
        ("coder", 80),
        ("support-bot", 14),
        ("researcher", 80),
        ("coder", 20),
        ("support-bot", 80),
        ("ci-runner", 14),
        ("researcher", 26),
        ("coder", 80),
    ]
    for agent, cycles in plan:
        run = client.start_run(agent)
        drive_ping_pong(run, client, cycles=cycles)
        run.end()
        time.sleep(6)
    settle(pipeline)
    browser.goto(f"{base}/status?window=all&refresh=0")
    browser.assert_clean()
    DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
