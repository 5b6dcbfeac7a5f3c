"""compose/'s monitoring agrees with the worker: Prometheus scrapes the port and path the
workers serve their metrics on, and every metric (and label) the provisioned Grafana
dashboard queries is one that :class:`WorkerMetrics` exposes.

No Docker engine here: the files are read with PyYAML/json and checked against the code.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import faust
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from streams.core.events import Action, Decision
from streams.observability.incident_metrics import IncidentMetrics
from streams.observability.metrics import METRIC_NAMES, WorkerMetrics
from streams.web import register_views

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
PROMETHEUS_FILE = COMPOSE_DIR / "prometheus" / "prometheus.yml"
GRAFANA_DIR = COMPOSE_DIR / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "loopguard.json"
DATASOURCES = GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA_DIR / "provisioning" / "dashboards" / "loopguard.yml"

# Labels Prometheus adds to every scraped series, and the histogram bucket label.
TARGET_LABELS = {"instance", "job", "le"}
# PromQL words that look like identifiers but are not metric names.
PROMQL_WORDS = {
    "sum", "by", "without", "rate", "increase", "topk", "count", "max", "min", "avg",
    "histogram_quantile", "time", "label_values", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "bool", "offset",
}  # fmt: skip


def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def worker_services() -> dict[str, dict[str, Any]]:
    return {
        name: svc for name, svc in services().items() if argv(svc)[:2] == ["loopguard", "worker"]
    }


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path → repository path of the service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            out[target] = (COMPOSE_DIR / source).resolve()
    return out


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) with Compose defaults applied."""
    out = []
    for port in service.get("ports", []):
        text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", port)
        host, host_port, container = text.rsplit(":", 2)
        out.append((host, int(host_port), int(container)))
    return out


# ------------------------------------------------------------------ the metrics themselves


@pytest.fixture(scope="module")
def exposed() -> dict[str, set[str]]:
    """Sample name → label names, from a WorkerMetrics that saw one of everything."""
    m = WorkerMetrics()
    m.observe_event("tool_call")
    m.observe_decision(
        Decision("r", "agent", "gw", 1, 1, Action.BLOCK, "ping_pong", "critical", 3, "exec", "x")
    )
    m.observe_dead_letter("decode")
    m.set_lag(0, 1)
    m.set_runs(1)
    m.observe_latency(0.01)
    m.observe_event_ages(1.0, [0.99])
    m.audit_written(1)
    m.audit_error()
    m.set_audit_backlog(1)
    m.observe_gateway_timeout("gw")
    m.webhook_outcome("sent")
    m.webhook_retry()
    m.runs_evicted_for("ended")
    IncidentMetrics(m.registry).recorded_opening(1)  # registered when incidents are on
    families = list(text_string_to_metric_families(m.render().decode()))
    assert {f.name for f in families} >= set(METRIC_NAMES), "populate every metric above"
    out: dict[str, set[str]] = {}
    for family in families:
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    exprs = [t["expr"] for p in panels() for t in p.get("targets", [])]
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def metric_names(expr: str) -> set[str]:
    """Identifiers in metric position: not functions, keywords, labels, strings or ranges."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\{[^}]*\}", "{}", text)  # label matchers
    text = re.sub(r"label_values\(([^,]+),\s*\w+\)", r"\1", text)  # (metric, label)
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set(re.findall(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)", text))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"\d.*", n)}


def label_names(expr: str) -> set[str]:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    grouped = re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", text)
    matched = re.findall(r"\{([^}]*)\}", text)
    names = {n.strip() for group in grouped for n in group.split(",") if n.strip()}
    for matchers in matched:
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    label_values = re.findall(r"label_values\([^,]+,\s*(\w+)\)", text)
    return names | set(label_values)


def test_expression_parsing_helpers() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le) (rate(loopguard_event_processing_seconds_bucket"
        '{instance=~"$instance"}[$__rate_interval]))) / time() - max(up{job="x"} == 1)'
    )
    assert metric_names(expr) == {"loopguard_event_processing_seconds_bucket", "up"}
    assert label_names(expr) == {"le", "instance", "job"}
    assert label_names("label_values(loopguard_decisions_total, agent)") == {"agent"}
    assert metric_names('label_values(up{job="a"}, instance)') == {"up"}


def test_every_metric_the_dashboard_queries_exists(exposed: dict[str, set[str]]) -> None:
    queried = set()
    for expr in expressions():
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        for name in names:
            if name == "up":  # Prometheus' own per-target series
                continue
            assert name in exposed, f"{name!r} (in {expr!r}) is not exposed by WorkerMetrics"
            queried.add(name)
        labels_here = set().union(*(exposed.get(n, set()) for n in names)) | TARGET_LABELS
        unknown = label_names(expr) - labels_here
        assert not unknown, f"labels {unknown} are not on {names} (in {expr!r})"
    # and the dashboard uses every family the worker exposes
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in queried}
    assert families >= set(METRIC_NAMES) - {"loopguard_worker_start_time_seconds"}


def test_dashboard_has_the_panels_the_issue_asks_for() -> None:
    titles = {p["title"].lower() for p in panels()}
    for wanted in (
        "loops over time by action",
        "loops over time by detector",
        "top looping agents",
        "top looping tools",
        "consumer lag by partition",
        "throughput by event type",
        "event processing latency",
    ):
        assert wanted in titles, wanted
    dash = dashboard()
    assert dash["uid"] == "loopguard" and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0


def test_dashboard_reads_the_provisioned_prometheus() -> None:
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert source["type"] == "prometheus"
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": source["uid"]}
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
    # the datasource URL is the prometheus service, on the port it listens on
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", source["url"]).groups()
    assert host in services()
    assert int(port) in {container for _, _, container in published(services()[host])}


def test_grafana_service_mounts_the_provisioning() -> None:
    grafana = services()["grafana"]
    mounted = mounts(grafana)
    assert mounted["/etc/grafana/provisioning"] == (GRAFANA_DIR / "provisioning").resolve()
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert mounted[provider["options"]["path"]] == DASHBOARD.parent.resolve()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert mounted[str(Path(home).parent)] / Path(home).name == DASHBOARD.resolve()
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    password = grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${GRAFANA_ADMIN_PASSWORD:?"), "no default admin password"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


# ------------------------------------------------------------------ Prometheus → workers


def test_prometheus_scrapes_every_worker_on_its_web_port() -> None:
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "loopguard-worker"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    (sd,) = job["dns_sd_configs"]
    assert sd["type"] == "A"
    workers = worker_services()
    for name, worker in workers.items():  # every replica of every worker service, by its
        aliases = (worker.get("networks") or {}).get("default", {}).get("aliases", [])
        assert {name, *aliases} & set(sd["names"]), name  # name or a network alias
    assert set(sd["names"]) <= set(workers)
    for name, worker in workers.items():
        args = argv(worker)
        port = int(args[args.index("--web-port") + 1])
        assert sd["port"] == port, name
        # the healthcheck asks the same web server
        assert f"127.0.0.1:{port}/healthz" in " ".join(worker["healthcheck"]["test"])
    # the dashboard's "Workers up" counts this job
    assert any('job="loopguard-worker"' in e for e in expressions())


def test_prometheus_service() -> None:
    prometheus = services()["prometheus"]
    args = argv(prometheus)
    config = next(a.split("=", 1)[1] for a in args if a.startswith("--config.file="))
    assert mounts(prometheus)[config] == PROMETHEUS_FILE.resolve()
    assert any(v.endswith(":/prometheus") for v in prometheus["volumes"])
    assert "worker" in prometheus["depends_on"]


def test_monitoring_images_are_pinned_and_ports_stay_on_loopback() -> None:
    for name, repo in (("prometheus", "prom/prometheus"), ("grafana", "grafana/grafana")):
        service = services()[name]
        image, _, tag = service["image"].partition(":")
        assert image == repo and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), service["image"]
        assert "healthcheck" in service
        for host, _, _ in published(service):
            assert host == "127.0.0.1", f"{name} published beyond loopback by default"


def test_metrics_path_is_served_by_the_worker() -> None:
    app = faust.App("compose-metrics-check", broker="kafka://127.0.0.1:1", web_enabled=True)
    register_views(app, "sqlite://")
    paths = {route.resource.canonical for route in app.web.web_app.router.routes()}
    assert {"/metrics", "/healthz", "/status"} <= paths


def test_workers_web_server_listens_beyond_loopback() -> None:
    """Prometheus runs in its own container: the workers' web server must not bind 127.0.0.1."""
    for name, worker in worker_services().items():
        env = worker.get("environment") or {}
        assert env.get("LOOPGUARD_WEB_BIND") == "0.0.0.0", name
