"""deploy/helm/loopguard renders, validates against the Kubernetes API's schemas (and KEDA's and
the Prometheus Operator's models), and the objects it renders carry what the workers need:
static membership from the pod name, probes on /healthz, the web token from a Secret, a KEDA
ScaledObject on the events topic's lag within 1 <= min <= max <= partitions and with a long
scale-down window, and a ServiceMonitor on /metrics.

The tools come from the registries into a cache (``python3 tests/helm_tools/tools.py fetch``).
Without them these tests skip, unless ``LOOPGUARD_REQUIRE_HELM=1`` (.ci/run sets it after
fetching them), where a missing tool fails the run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import faust
import pytest
import yaml
from helm_tools.tools import Tools, installed, planned

from streams.settings import Settings
from streams.web import register_views
from streams.wire.signing import GatewayKeys
from tests.settings_env import settings_from_env
from tests.unit.test_compose import settings_env_names

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "loopguard"
CI_VALUES = CHART / "ci" / "ci-values.yaml"
REQUIRE_ENV = "LOOPGUARD_REQUIRE_HELM"
# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest the
# validator knows.
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")
CUSTOM_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
# The longest failover the benchmarks measured, a kill until every partition was guarded
# again with 30,000 runs rebuilt from the changelog (docs/benchmarks.md, "Failover").
RECOVERY_SECONDS = 13.3
GATEWAY_KEYS_SUFFIX = "-gateway-keys"  # the Secret the chart makes from gatewayKeys.keys
SPLIT = "roles.split=true"  # guard and audit workers apart (docs/operations.md, "Worker roles")


@pytest.fixture(scope="module")
def tools() -> Tools:
    found = installed()
    if found is not None:
        return found
    why = (
        f"the chart's tools are not in the cache ({planned().helm} ...): "
        "run python3 tests/helm_tools/tools.py fetch"
    )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {why}", pytrace=False)
    pytest.skip(why)


def helm(tools: Tools, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/loopguard-helm-cache"}
    return subprocess.run(
        [tools.helm, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def render(tools: Tools, *sets: str, values: Path = CI_VALUES) -> list[dict[str, Any]]:
    """``helm template`` with the CI values and ``--set`` overrides: the rendered objects."""
    args = ["template", "lg", str(CHART), "-f", str(values)]
    for item in sets:
        args += ["--set", item]
    done = helm(tools, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refused(tools: Tools, *sets: str) -> str:
    """The error of a ``helm template`` that must fail."""
    args = ["template", "lg", str(CHART), "-f", str(CI_VALUES)]
    for item in sets:
        args += ["--set", item]
    done = helm(tools, *args)
    assert done.returncode != 0, f"helm rendered {sets} without complaint"
    return done.stderr


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def chart_secret(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The Secret of the web token, database URL and SASL pair (not the gateway keys')."""
    (secret,) = [
        o
        for o in objects
        if o["kind"] == "Secret" and not o["metadata"]["name"].endswith(GATEWAY_KEYS_SUFFIX)
    ]
    return secret


def worker_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container["env"]}


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {name: e["value"] for name, e in env_of(container).items() if "value" in e}


@pytest.fixture(scope="module")
def rendered(tools: Tools) -> list[dict[str, Any]]:
    return render(tools)


# ----------------------------------------------------------------- rendering and validation


@pytest.mark.parametrize("sets", [(), ("--set", SPLIT)], ids=["role-all", "split-roles"])
def test_helm_lint_is_clean(tools: Tools, sets: tuple[str, ...]) -> None:
    done = helm(tools, "lint", "--strict", str(CHART), "-f", str(CI_VALUES), *sets)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("sets", [(), (SPLIT,)], ids=["role-all", "split-roles"])
def test_built_in_kinds_validate_strictly_against_the_kubernetes_schemas(
    tools: Tools, sets: tuple[str, ...], tmp_path: Path
) -> None:
    core = [o for o in render(tools, *sets) if not o["apiVersion"].startswith(CUSTOM_GROUPS)]
    assert {o["kind"] for o in core} >= {"StatefulSet", "Service", "ConfigMap", "Secret", "Job"}
    manifest = tmp_path / "core.yaml"
    manifest.write_text(yaml.safe_dump_all(core), encoding="utf-8")
    versions = [arg for v in KUBERNETES_VERSIONS for arg in ("-k", v)]
    done = subprocess.run(
        [tools.validate, "--strict", *versions, str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Every object passed against both versions; none was skipped for want of a schema.
    assert "WARN" not in done.stdout, done.stdout
    passed = re.findall(r"passed for resource (\S+) against version (\S+)", done.stdout)
    assert len(passed) == len(core) * len(KUBERNETES_VERSIONS), done.stdout


@pytest.mark.parametrize("sets", [(), (SPLIT,)], ids=["role-all", "split-roles"])
def test_every_object_validates_with_the_kubernetes_models(
    tools: Tools, sets: tuple[str, ...]
) -> None:
    sasl = render(
        tools, "kafka.saslMechanism=SCRAM-SHA-512", "kafka.securityProtocol=SASL_SSL",
        "secret.data.saslUsername=worker", "secret.data.saslPassword=pw", *sets,
    )  # fmt: skip
    objects = render(tools, *sets) + [o for o in sasl if o["kind"] == "TriggerAuthentication"]
    assert {o["kind"] for o in objects} >= {
        "ScaledObject", "TriggerAuthentication", "ServiceMonitor", "StatefulSet",
    }  # fmt: skip
    done = subprocess.run(
        ["node", "validate_crds.mjs"],
        input=json.dumps(objects),
        cwd=tools.models,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("OK ") == len(objects), done.stdout


def test_chart_app_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert chart["appVersion"] == project["version"]


# ------------------------------------------------------------------------- the workers


def test_workers_are_a_statefulset_with_static_membership_from_the_pod_name(
    rendered: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = one(rendered, "StatefulSet")
    assert workers["spec"]["serviceName"] == one(rendered, "Service")["metadata"]["name"]
    container = worker_container(rendered)
    entry = env_of(container)["LOOPGUARD_GROUP_INSTANCE_ID"]
    assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The worker reads these variables as the settings the chart means.
    env = plain_env(container)
    for name, value in {**env, "LOOPGUARD_GROUP_INSTANCE_ID": "lg-loopguard-worker-2"}.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert settings.group_instance_id == "lg-loopguard-worker-2"
    assert settings.session_timeout == 30.0
    assert settings.heartbeat_interval * 3 <= settings.session_timeout
    assert settings.bootstrap_servers == [
        "kafka-0.kafka:9092", "kafka-1.kafka:9092", "kafka-2.kafka:9092",
    ]  # fmt: skip
    assert settings.web_bind == "0.0.0.0"
    assert settings.partitions == 12


def test_dynamic_membership_when_static_membership_is_off(tools: Tools) -> None:
    env = env_of(worker_container(render(tools, "staticMembership.enabled=false")))
    assert "LOOPGUARD_GROUP_INSTANCE_ID" not in env
    assert "LOOPGUARD_SESSION_TIMEOUT" not in env  # the profile's 6 s


def test_every_variable_the_chart_sets_is_one_the_worker_reads(tools: Tools) -> None:
    objects = render(
        tools, "kafka.saslMechanism=SCRAM-SHA-512", "kafka.sslCafile=/etc/ca/ca.pem",
        "kafka.processingGuarantee=at_least_once", "web.allowedHosts=loopguard.example.com",
        "secret.data.saslUsername=worker", "secret.data.saslPassword=pw",
    )  # fmt: skip
    names = {n for n in env_of(worker_container(objects)) if n.startswith("LOOPGUARD_")}
    assert names - settings_env_names() == set()


def test_probes_read_healthz_on_the_port_the_worker_serves(rendered: list[dict[str, Any]]) -> None:
    container = worker_container(rendered)
    (port,) = container["ports"]
    assert port["name"] == "web"
    args = container["args"]
    assert args[:2] == ["loopguard", "worker"]
    assert args[args.index("--web-port") + 1] == str(port["containerPort"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "web"}, probe
    app = faust.App("helm-probe-check", broker="kafka://127.0.0.1:1", web_enabled=True)
    register_views(app, "sqlite://")
    paths = {route.resource.canonical for route in app.web.web_app.router.routes()}
    assert {"/healthz", "/metrics"} <= paths


def test_the_web_token_and_database_url_come_from_the_secret(
    rendered: list[dict[str, Any]],
) -> None:
    secret = chart_secret(rendered)
    env = env_of(worker_container(rendered))
    for name, key in (("LOOPGUARD_WEB_TOKEN", "web-token"), ("LOOPGUARD_DB_URL", "db-url")):
        assert "value" not in env[name], f"{name} written inline"
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": secret["metadata"]["name"],
            "key": key,
        }
        assert secret["stringData"][key]
    job = one(rendered, "Job")
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["loopguard", "migrate"]
    assert env_of(migrate)["LOOPGUARD_DB_URL"] == env["LOOPGUARD_DB_URL"]
    # The Secret exists before the migrate Job that reads it (hook weights).
    weight = int(secret["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert weight < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_an_existing_secret_is_referenced_and_none_is_made(tools: Tools) -> None:
    objects = render(
        tools, "secret.existingSecret=fleet-secrets", "secret.data.webToken=",
        "secret.data.dbUrl=",
    )  # fmt: skip
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == [
        "lg-loopguard-gateway-keys"
    ]  # the gateway keys' own (gatewayKeys.existingSecret names a Secret of yours for them)
    ref = env_of(worker_container(objects))["LOOPGUARD_WEB_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "fleet-secrets", "key": "web-token"}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("secret.data.webToken=",), "secret.data.webToken"),
        (("secret.data.dbUrl=",), "secret.data.dbUrl"),
        (("kafka.brokers=null",), "kafka.brokers"),
    ],
)
def test_required_values_are_asked_for(tools: Tools, sets: tuple[str, ...], message: str) -> None:
    assert message in refused(tools, *sets)


# ---------------------------------------------------------------------------- gateway keys


def test_the_workers_get_the_gateway_keys_from_the_secret_the_chart_makes(
    rendered: list[dict[str, Any]], tools: Tools
) -> None:
    (keys_secret,) = [
        o
        for o in rendered
        if o["kind"] == "Secret" and o["metadata"]["name"].endswith(GATEWAY_KEYS_SUFFIX)
    ]
    assert "annotations" not in keys_secret["metadata"]  # an ordinary object, not a hook
    ref = env_of(worker_container(rendered))["LOOPGUARD_GATEWAY_KEYS"]
    assert "value" not in ref, "the keys written inline"
    assert ref["valueFrom"]["secretKeyRef"] == {
        "name": keys_secret["metadata"]["name"],
        "key": "gateway-keys",
    }
    # What the worker reads from it is a keys file it accepts: the CI values' gateway and
    # operator (the worker takes the JSON itself in LOOPGUARD_GATEWAY_KEYS).
    keys = GatewayKeys.load(keys_secret["stringData"]["gateway-keys"])
    assert set(keys.rings) == {"ci-gateway"} and keys.operators is not None
    assert keys.operators.key_id == "op1"

    # New keys roll the workers (they read the keys at start); the config's checksum stays.
    def annotations(objects: list[dict[str, Any]]) -> dict[str, str]:
        return one(objects, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]

    rotated = annotations(
        render(tools, "gatewayKeys.keys.gateways.ci-gateway.k2=new-gateway-secret-0")
    )
    before = annotations(rendered)
    assert rotated["checksum/gateway-keys"] != before["checksum/gateway-keys"]
    assert rotated["checksum/config"] == before["checksum/config"]


def test_gateway_keys_from_an_existing_secret(tools: Tools) -> None:
    objects = render(
        tools, "gatewayKeys.existingSecret=fleet-gateway-keys", "gatewayKeys.keys=null"
    )
    assert not [o for o in objects if o["metadata"]["name"].endswith(GATEWAY_KEYS_SUFFIX)]
    ref = env_of(worker_container(objects))["LOOPGUARD_GATEWAY_KEYS"]["valueFrom"]
    assert ref["secretKeyRef"] == {"name": "fleet-gateway-keys", "key": "gateway-keys"}
    pod = one(objects, "StatefulSet")["spec"]["template"]["metadata"]
    assert "checksum/gateway-keys" not in pod["annotations"]  # yours: restart them yourself


def test_gateway_keys_are_required_unless_turned_off(tools: Tools) -> None:
    assert "gatewayKeys.keys" in refused(tools, "gatewayKeys.keys=null")
    objects = render(tools, "gatewayKeys.enabled=false", "gatewayKeys.keys=null")
    assert "LOOPGUARD_GATEWAY_KEYS" not in env_of(worker_container(objects))
    assert [o["kind"] for o in objects].count("Secret") == 1  # the chart's own only


# ---------------------------------------------------------------------------- autoscaling


def test_keda_scales_the_workers_on_the_events_topics_lag(rendered: list[dict[str, Any]]) -> None:
    scaled = one(rendered, "ScaledObject")["spec"]
    workers = one(rendered, "StatefulSet")
    assert scaled["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": workers["metadata"]["name"],
    }
    assert "replicas" not in workers["spec"], "KEDA owns the count; helm upgrades would reset it"
    env = plain_env(worker_container(rendered))
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["topic"] == f"{env['LOOPGUARD_TOPIC_PREFIX']}.events"
    assert meta["consumerGroup"] == env["LOOPGUARD_APP_ID"]
    brokers = Settings(broker=env["LOOPGUARD_BROKER"]).bootstrap_servers
    assert meta["bootstrapServers"].split(",") == brokers
    assert meta["allowIdleConsumers"] == "false"
    assert int(meta["lagThreshold"]) > 0
    partitions = int(env["LOOPGUARD_PARTITIONS"])
    assert 1 <= scaled["minReplicaCount"] <= scaled["maxReplicaCount"] <= partitions


def test_scale_down_waits_long_enough_for_table_recovery(rendered: list[dict[str, Any]]) -> None:
    behavior = one(rendered, "ScaledObject")["spec"]["advanced"]["horizontalPodAutoscalerConfig"][
        "behavior"
    ]
    env = plain_env(worker_container(rendered))
    # A scale's partitions are unguarded for the session timeout (static members do not leave)
    # and the recovery; the lag that leaves must not read as load, nor a quiet spell as spare.
    settle = float(env["LOOPGUARD_SESSION_TIMEOUT"]) + RECOVERY_SECONDS
    down, up = behavior["scaleDown"], behavior["scaleUp"]
    assert down["stabilizationWindowSeconds"] >= 10 * settle
    assert up["stabilizationWindowSeconds"] >= settle
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    assert all(p["periodSeconds"] >= settle for p in up["policies"] + down["policies"])


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("autoscaling.maxReplicaCount=13",), "exceeds partitions"),
        (("autoscaling.minReplicaCount=7",), "exceeds maxReplicaCount"),
        (("autoscaling.minReplicaCount=0",), "never scales to zero"),
        (("partitions=4",), "exceeds partitions"),
    ],
)
def test_the_chart_refuses_replica_bounds_beyond_the_partitions(
    tools: Tools, sets: tuple[str, ...], message: str
) -> None:
    assert message in refused(tools, *sets)


def test_without_autoscaling_the_statefulset_keeps_its_count(tools: Tools) -> None:
    objects = render(tools, "autoscaling.enabled=false", "replicaCount=4")
    assert not [o for o in objects if o["kind"] in ("ScaledObject", "TriggerAuthentication")]
    assert one(objects, "StatefulSet")["spec"]["replicas"] == 4


def test_sasl_credentials_reach_the_workers_and_keda_from_the_same_secret(tools: Tools) -> None:
    objects = render(
        tools, "kafka.saslMechanism=SCRAM-SHA-512", "kafka.securityProtocol=SASL_SSL",
        "secret.data.saslUsername=worker", "secret.data.saslPassword=pw",
    )  # fmt: skip
    secret = chart_secret(objects)["metadata"]["name"]
    env = env_of(worker_container(objects))
    assert env["LOOPGUARD_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
    assert env["LOOPGUARD_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": secret,
        "key": "sasl-password",
    }
    (trigger,) = one(objects, "ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["sasl"] == "scram_sha512"
    assert trigger["metadata"]["tls"] == "enable"
    auth = one(objects, "TriggerAuthentication")
    assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"username": (secret, "sasl-username"), "password": (secret, "sasl-password")}


# ----------------------------------------------------------------------------- monitoring


def test_the_service_monitor_scrapes_every_worker_on_metrics(
    rendered: list[dict[str, Any]],
) -> None:
    monitor = one(rendered, "ServiceMonitor")["spec"]
    service = one(rendered, "Service")
    assert service["spec"]["clusterIP"] == "None"  # headless: one target per worker
    labels = service["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert "authorization" not in endpoint  # /metrics needs no token by default


def test_a_token_on_metrics_is_sent_by_the_service_monitor(tools: Tools) -> None:
    objects = render(tools, "web.tokenForMetrics=true")
    (endpoint,) = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    secret = chart_secret(objects)["metadata"]["name"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret, "key": "web-token"},
    }
    assert plain_env(worker_container(objects))["LOOPGUARD_WEB_TOKEN_METRICS"] == "1"


# --------------------------------------------------------------- worker roles (issue 42)


def named(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    """The object of ``kind`` whose name ends with ``suffix`` (``-worker``, ``-audit``)."""
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def container_of(statefulset: dict[str, Any]) -> dict[str, Any]:
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return container


def settings_of(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings.from_env over exactly the container's plain env."""
    return settings_from_env(plain_env(container), monkeypatch)


@pytest.fixture(scope="module")
def split(tools: Tools) -> list[dict[str, Any]]:
    return render(tools, SPLIT)


def test_by_default_every_worker_runs_role_all(
    rendered: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    container = worker_container(rendered)  # the one StatefulSet
    assert "LOOPGUARD_ROLE" not in env_of(container)
    assert settings_of(container, monkeypatch).role == "all"
    assert "LOOPGUARD_DB_URL" in env_of(container)


def test_split_roles_render_a_guard_and_an_audit_statefulset(
    split: list[dict[str, Any]], rendered: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    guard_set, audit_set = (
        named(split, "StatefulSet", "-worker"),
        named(split, "StatefulSet", "-audit"),
    )
    assert len([o for o in split if o["kind"] == "StatefulSet"]) == 2
    # The guards are today's StatefulSet (name, selector), so an upgrade rolls it in place.
    assert guard_set["metadata"]["name"] == one(rendered, "StatefulSet")["metadata"]["name"]
    assert guard_set["spec"]["selector"] == one(rendered, "StatefulSet")["spec"]["selector"]
    guard, audit = container_of(guard_set), container_of(audit_set)
    assert plain_env(guard)["LOOPGUARD_ROLE"] == "guard"
    assert plain_env(audit)["LOOPGUARD_ROLE"] == "audit"
    assert guard["args"] == audit["args"] == worker_container(rendered)["args"]

    all_settings = settings_of(worker_container(rendered), monkeypatch)
    guard_settings = settings_of(guard, monkeypatch)
    audit_settings = settings_of(audit, monkeypatch)
    assert guard_settings.app_id == audit_settings.app_id == all_settings.app_id
    assert guard_settings.group_id == all_settings.group_id  # the same group and changelogs
    assert audit_settings.group_id == f"{all_settings.app_id}-audit"
    assert (guard_settings.guards, guard_settings.audits) == (True, False)
    assert (audit_settings.guards, audit_settings.audits) == (False, True)

    # Only the audit role reads the database URL; both read the web token and gateway keys.
    all_env = env_of(worker_container(rendered))
    assert "LOOPGUARD_DB_URL" not in env_of(guard)
    assert env_of(audit)["LOOPGUARD_DB_URL"] == all_env["LOOPGUARD_DB_URL"]
    for container in (guard, audit):
        for name in (
            "LOOPGUARD_WEB_TOKEN",
            "LOOPGUARD_GATEWAY_KEYS",
            "LOOPGUARD_GROUP_INSTANCE_ID",
        ):
            assert env_of(container)[name] == all_env[name], name
        names = {n for n in env_of(container) if n.startswith("LOOPGUARD_")}
        assert names - settings_env_names() == set()

    # KEDA scales the guards on their group's lag; the audit workers keep their own count.
    scaled = one(split, "ScaledObject")["spec"]
    assert scaled["scaleTargetRef"]["name"] == guard_set["metadata"]["name"]
    (trigger,) = scaled["triggers"]
    assert trigger["metadata"]["consumerGroup"] == guard_settings.group_id
    assert "replicas" not in guard_set["spec"]
    assert audit_set["spec"]["replicas"] == 2


def test_split_roles_each_have_their_selector_service_budget_and_monitor(
    split: list[dict[str, Any]],
) -> None:
    sets = {s["metadata"]["name"]: s for s in split if s["kind"] == "StatefulSet"}
    services = {s["metadata"]["name"]: s for s in split if s["kind"] == "Service"}
    budgets = {b["metadata"]["name"]: b for b in split if b["kind"] == "PodDisruptionBudget"}
    monitors = [m for m in split if m["kind"] == "ServiceMonitor"]
    assert set(sets) == set(services) == set(budgets)
    pod_labels = {name: s["spec"]["template"]["metadata"]["labels"] for name, s in sets.items()}
    for name, statefulset in sets.items():
        selector = statefulset["spec"]["selector"]["matchLabels"]
        # Each selector picks its own pods and never the other role's.
        chosen = [
            other for other, labels in pod_labels.items() if selector.items() <= labels.items()
        ]
        assert chosen == [name]
        service = services[statefulset["spec"]["serviceName"]]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == selector
        assert budgets[name]["spec"]["selector"]["matchLabels"] == selector
        # One ServiceMonitor scrapes each role's Service, on /metrics.
        scraping = [
            m for m in monitors
            if m["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        ]  # fmt: skip
        assert len(scraping) == 1, name
        (endpoint,) = scraping[0]["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        container = container_of(statefulset)
        assert {p["name"] for p in container["ports"]} == {
            p["targetPort"] for p in service["spec"]["ports"]
        }
        assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "web"}
    # The status pages live on the audit role's pods: its Service reaches them.
    assert any(name.endswith("-audit") for name in services)


def test_the_audit_role_can_have_its_own_resources(tools: Tools) -> None:
    objects = render(tools, SPLIT, "roles.audit.resources.requests.cpu=100m")
    assert container_of(named(objects, "StatefulSet", "-audit"))["resources"] == {
        "requests": {"cpu": "100m"}
    }
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["resources"]
    assert container_of(named(objects, "StatefulSet", "-worker"))["resources"] == defaults
    assert (
        container_of(named(render(tools, SPLIT), "StatefulSet", "-audit"))["resources"] == defaults
    )


@pytest.mark.parametrize("count", ["0", "13"])
def test_the_chart_refuses_audit_replicas_beyond_the_partitions(tools: Tools, count: str) -> None:
    assert "roles.audit.replicaCount" in refused(tools, SPLIT, f"roles.audit.replicaCount={count}")
