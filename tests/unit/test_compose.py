"""compose/ agrees with the code: topics, worker settings, KRaft/durability, secrets, image.

The production stack cannot run here (no Docker engine), so this reads
compose/docker-compose.yml with PyYAML, applies Compose's variable interpolation itself, and
checks it against what loopguard actually reads and creates.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka_cluster.cluster import DEFAULT_VERSION
from sqlalchemy.engine import make_url

from streams.cli.main import build_parser
from streams.core.fleet import load_fleet_config
from streams.kafka.topics import topic_specs
from streams.settings import Settings
from streams.wire.schema_registry import SCHEMA_DIR
from streams.wire.signing import GatewayKeys
from tests.settings_env import settings_from_env

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"

# What an operator's compose/.env provides (only the required variables; the rest default).
TEST_ENV = {"POSTGRES_PASSWORD": "pw-from-dot-env", "GRAFANA_ADMIN_PASSWORD": "gf-from-dot-env"}
# The Kafka principals' passwords (SASL/SCRAM, issue 26): one per principal, all required.
KAFKA_PASSWORDS = {
    f"KAFKA_{who.upper()}_PASSWORD": f"{who}-from-dot-env"
    for who in ("controller", "broker", "admin", "worker", "gateway")
}
TEST_ENV.update(KAFKA_PASSWORDS)
# Every gateway's signing keys (issue 40): required by the workers.
GATEWAY_KEYS = '{"gateways":{"gw-1":{"k1":"0123456789abcdef0123456789abcdef"}}}'
TEST_ENV["LOOPGUARD_GATEWAY_KEYS"] = GATEWAY_KEYS

# ------------------------------------------------------------------ Compose interpolation

_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(KeyError):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``, ..."""

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg = match["op"], match["arg"]
        value = env.get(name)
        missing = not value if op and op.startswith(":") else value is None
        if op in (":-", "-"):
            return arg if missing else value  # type: ignore[return-value]
        if op in (":?", "?"):
            if missing:
                raise MissingVariable(f"{name}: {arg}")
            return value  # type: ignore[return-value]
        if op in (":+", "+"):
            return "" if missing else arg
        return value or ""

    return _INTERPOLATION.sub(substitute, text)


def interpolate_tree(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    return node


def referenced_variables(text: str) -> set[str]:
    return {m["braced"] or m["named"] for m in _INTERPOLATION.finditer(text) if not m["escaped"]}


def shell_expand(text: str, env: dict[str, str]) -> str:
    """Expand ``$NAME`` / ``${NAME}`` for the names in ``env`` (the job's environment)."""

    def substitute(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        return env[name] if name in env else match[0]

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", substitute, text)


# ------------------------------------------------------------------ reading the stack


def load_raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def strings(node: Any) -> list[str]:
    """Every string value of the (uninterpolated) file: what Compose interpolates."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return []


def mask_references(text: str) -> str:
    """Replace every ${VARIABLE} reference by ``{ref}`` (``$$`` stays a literal ``$``)."""
    return _INTERPOLATION.sub(lambda m: "$" if m["escaped"] else "{ref}", text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate_tree(load_raw(), TEST_ENV)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def kafka_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: svc for name, svc in services.items() if "KAFKA_PROCESS_ROLES" in environment(svc)
    }


def worker_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services.items() if argv(svc)[:2] == ["loopguard", "worker"]}


def default_workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The workers a plain ``docker compose up`` starts (no profile)."""
    return {name: svc for name, svc in worker_services(services).items() if not svc.get("profiles")}


def role_settings(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings.from_env over exactly this service's environment."""
    return settings_from_env(environment(service), monkeypatch)


def listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` → {NAME: (host, port)}."""
    result = {}
    for item in value.split(","):
        name, address = item.strip().split("://", 1)
        host, port = address.rsplit(":", 1)
        result[name] = (host, int(port))
    return result


def internal_bootstrap(services: dict[str, dict[str, Any]]) -> set[str]:
    """host:port of every broker's inter-broker listener (what in-network clients use)."""
    result = set()
    for svc in kafka_services(services).values():
        env = environment(svc)
        if "broker" in env["KAFKA_PROCESS_ROLES"].split(","):
            host, port = listeners(env["KAFKA_ADVERTISED_LISTENERS"])[
                env["KAFKA_INTER_BROKER_LISTENER_NAME"]
            ]
            result.add(f"{host}:{port}")
    return result


@pytest.fixture
def worker_settings(services, monkeypatch) -> Settings:
    """The Settings a compose worker ends up with: Settings.from_env over its environment."""
    worker = next(iter(worker_services(services).values()))
    return settings_from_env(environment(worker), monkeypatch)


def settings_env_names() -> set[str]:
    """Every variable Settings.from_env() reads, recorded through a stand-in os.environ."""

    class RecordingEnviron(dict):
        def __init__(self) -> None:
            super().__init__()
            self.read: set[str] = set()

        def get(self, key, default=None):
            self.read.add(key)
            return super().get(key, default)

        def __getitem__(self, key):
            self.read.add(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            self.read.add(key)
            return super().__contains__(key)

    recorder = RecordingEnviron()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", recorder)
        Settings.from_env()
    return set(recorder.read)


def topics_job_creations(services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """``create NAME PARTITIONS POLICY [CONFIG...]`` lines of the topics job, shell-expanded."""
    job = services["topics"]
    script = argv(job)[-1]
    env = environment(job)
    created: dict[str, list[str]] = {}
    for line in script.splitlines():
        match = re.match(r"\s*create\s+(.+)$", line)
        if match:
            name, *rest = shlex.split(shell_expand(match[1], env))
            assert name not in created, f"topic {name} created twice"
            created[name] = rest
    return created


# ------------------------------------------------------------------ topics


def test_topics_job_creates_exactly_topic_specs(services, worker_settings):
    job_env = environment(services["topics"])
    for key in ("LOOPGUARD_APP_ID", "LOOPGUARD_PARTITIONS", "LOOPGUARD_REPLICATION"):
        assert job_env[key] == environment(next(iter(worker_services(services).values())))[key]

    created = topics_job_creations(services)
    specs = {spec.name: spec for spec in topic_specs(worker_settings)}
    assert set(created) == set(specs)
    for name, spec in specs.items():
        partitions, policy, *extra = created[name]
        assert int(partitions) == spec.num_partitions, name
        assert policy == (spec.topic_configs or {}).get("cleanup.policy", "delete"), name
        for config in extra:
            assert re.fullmatch(r"[a-z.]+=\w+", config), config
            assert not config.startswith("cleanup.policy="), name
    # the per-run topics share one partition count (Faust co-partitioning)
    per_run = [
        "loopguard.events",
        "loopguard.control",
        f"{worker_settings.app_id}-runs-changelog",
        f"{worker_settings.app_id}-sessions-changelog",
    ]
    assert len({specs[name].num_partitions for name in per_run}) == 1


def test_topics_job_uses_replication_3_min_isr_2_and_checks_partitions(services):
    job = services["topics"]
    script = shell_expand(argv(job)[-1], environment(job))
    assert job["entrypoint"][0].endswith("bash")
    assert "/opt/kafka/bin/kafka-topics.sh" in script
    assert "--create --if-not-exists" in script
    assert re.search(r'--replication-factor\s+"?3"?\s', script)
    assert "min.insync.replicas=2" in script
    assert "--describe" in script and "PartitionCount" in script  # mismatch fails the job
    assert "set -euo pipefail" in script
    assert set(environment(job)["BOOTSTRAP"].split(",")) == internal_bootstrap(services)
    assert job.get("restart") == "no"
    for broker in kafka_services(services):
        assert job["depends_on"][broker]["condition"] == "service_healthy"


def test_shell_dollars_are_escaped_for_compose():
    """A lone ``$`` in the job script would be Compose interpolation, not shell."""
    script = load_raw()["services"]["topics"]["command"][-1]
    assert referenced_variables(script) == set()
    for value in strings(load_raw()):
        leftover = _INTERPOLATION.sub("", value)
        assert "$" not in leftover, f"neither `$$` nor a valid ${{VARIABLE}}: {value!r}"


# ------------------------------------------------------------------ workers


def test_workers_run_loopguard_worker_against_the_bundled_services(services, monkeypatch):
    workers = worker_services(services)
    assert workers, "no service runs `loopguard worker`"
    replicas = sum(
        (svc.get("deploy") or {}).get("replicas", 1) for svc in default_workers(services).values()
    )
    assert replicas >= 2
    for name, worker in workers.items():
        env = environment(worker)
        settings = role_settings(worker, monkeypatch)
        args = build_parser().parse_args(argv(worker)[1:])  # flags exist, defaults from env
        assert args.command == "worker"
        assert args.role == settings.role, name
        assert args.broker == env["LOOPGUARD_BROKER"], name
        if settings.audits:
            assert args.db == env["LOOPGUARD_DB_URL"], name
        assert env["LOOPGUARD_REPLICATION"] == "3"
        # no idle worker by design (the split's guards share the events partitions)
        assert int(env["LOOPGUARD_PARTITIONS"]) >= (worker.get("deploy") or {})["replicas"]

        # LOOPGUARD_BROKER reaches every broker of this file on its inter-broker listener
        servers = Settings(broker=env["LOOPGUARD_BROKER"]).bootstrap_servers
        assert set(servers) == internal_bootstrap(services)

        # the mounted config file is the one --config names, and it is valid
        mounts = {}
        for volume in worker.get("volumes", []):
            source, target, *_ = volume.split(":")
            mounts[target] = COMPOSE_DIR / source
        assert args.config in mounts, f"{args.config} is not mounted"
        assert mounts[args.config] == COMPOSE_DIR / "loopguard.json5"
        fleet = load_fleet_config(mounts[args.config])
        assert fleet.agent_blocks, "the example config should show a per-agent override"
        for agent in fleet.agent_blocks:
            assert fleet.for_agent(agent) != fleet.for_agent("some-other-agent")

        deps = worker["depends_on"]
        for broker in kafka_services(services):
            assert deps[broker]["condition"] == "service_healthy"
        if settings.audits:  # writes the audit trail: the database and its schema first
            assert deps["postgres"]["condition"] == "service_healthy"
            assert deps["migrate"]["condition"] == "service_completed_successfully"
        assert deps["topics"]["condition"] == "service_completed_successfully"
        assert worker["build"]["dockerfile"] == "compose/Dockerfile"
        assert "healthcheck" in worker


def test_worker_settings(worker_settings, services):
    assert worker_settings.replication == 3
    assert worker_settings.partitions == int(
        environment(services["topics"])["LOOPGUARD_PARTITIONS"]
    )
    # the bundled cluster takes SASL/SCRAM only; workers are the `worker` principal
    assert worker_settings.security_protocol == "SASL_PLAINTEXT"
    assert worker_settings.sasl_mechanism == "SCRAM-SHA-512"
    assert worker_settings.sasl_username == "worker"
    assert worker_settings.sasl_password == KAFKA_PASSWORDS["KAFKA_WORKER_PASSWORD"]
    assert worker_settings.db_url.startswith("postgresql+psycopg://")


def test_db_url_uses_psycopg_and_the_postgres_service(services, monkeypatch):
    postgres = services["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    assert postgres["image"].split(":")[1].split("-")[0].split(".")[0] == "16"
    assert "healthcheck" in postgres
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    pg_env = environment(postgres)
    writers = [
        w for w in worker_services(services).values() if role_settings(w, monkeypatch).audits
    ]
    users = [*writers, services["migrate"]]
    for service in users:
        url = make_url(environment(service)["LOOPGUARD_DB_URL"])
        assert url.drivername == "postgresql+psycopg"
        assert url.host == "postgres" and url.host in services
        assert (url.port or 5432) == 5432
        assert url.username == pg_env["POSTGRES_USER"]
        assert url.database == pg_env["POSTGRES_DB"]
        assert url.password == pg_env["POSTGRES_PASSWORD"] == TEST_ENV["POSTGRES_PASSWORD"]


def test_migrate_job(services, monkeypatch):
    job = services["migrate"]
    env = environment(job)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = build_parser().parse_args(argv(job)[1:])
    assert argv(job)[:2] == ["loopguard", "migrate"]
    assert args.db == env["LOOPGUARD_DB_URL"]
    assert job["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert job.get("restart") == "no"
    assert job["build"] == next(iter(worker_services(services).values()))["build"]


# ------------------------------------------------------------- worker roles (issue 42)

SPLIT_PROFILE = "split-roles"


def test_the_default_stack_runs_one_worker_service_of_role_all(services, monkeypatch):
    assert list(default_workers(services)) == ["worker"]
    assert "LOOPGUARD_ROLE" not in environment(services["worker"])
    assert role_settings(services["worker"], monkeypatch).role == "all"
    # Only the split's two services carry a profile: a plain `up` starts what it did.
    profiled = {name for name, svc in services.items() if svc.get("profiles")}
    assert profiled == {"worker-guard", "worker-audit"}


def test_the_split_roles_profile_runs_a_guard_and_an_audit_service(services, monkeypatch):
    guard, audit, worker = services["worker-guard"], services["worker-audit"], services["worker"]
    for svc in (guard, audit):
        assert svc["profiles"] == [SPLIT_PROFILE]
        for key in ("command", "volumes", "healthcheck", "build", "image", "stop_grace_period"):
            assert svc[key] == worker[key], key  # the same worker, only its role differs
    guard_env, audit_env = environment(guard), environment(audit)
    assert guard_env["LOOPGUARD_ROLE"] == "guard" and audit_env["LOOPGUARD_ROLE"] == "audit"
    # Everything the `all` worker is given but the role (and, for the guard, the database).
    worker_env = environment(worker)
    assert {k: v for k, v in audit_env.items() if k != "LOOPGUARD_ROLE"} == worker_env
    without_db = {k: v for k, v in worker_env.items() if k != "LOOPGUARD_DB_URL"}
    assert {k: v for k, v in guard_env.items() if k != "LOOPGUARD_ROLE"} == without_db

    all_settings = role_settings(worker, monkeypatch)
    guard_settings = role_settings(guard, monkeypatch)
    audit_settings = role_settings(audit, monkeypatch)
    # One app id: the guard takes over the `all` workers' group, offsets and changelogs;
    # the audit process runs in <app id>-audit.
    assert guard_settings.app_id == audit_settings.app_id == all_settings.app_id
    assert guard_settings.group_id == all_settings.group_id == all_settings.app_id
    assert audit_settings.group_id == f"{all_settings.app_id}-audit"
    assert (guard_settings.guards, guard_settings.audits) == (True, False)
    assert (audit_settings.guards, audit_settings.audits) == (False, True)

    # The audit process writes the trail: the database, after postgres and the schema. The
    # guard never opens it, so it neither gets the URL nor waits for postgres.
    assert audit_settings.db_url == all_settings.db_url
    assert {"postgres", "migrate"} <= set(audit["depends_on"])
    assert "LOOPGUARD_DB_URL" not in guard_env
    assert not {"postgres", "migrate"} & set(guard["depends_on"])
    assert guard["deploy"]["replicas"] >= 2  # a standby for every partition's runs

    # Prometheus scrapes the name `worker`: both answer to it.
    for svc in (guard, audit):
        assert "worker" in svc["networks"]["default"]["aliases"]


def test_the_worker_principals_acls_cover_the_audit_roles_group_and_topics(services):
    audit_group = f"{environment(services['worker'])['LOOPGUARD_APP_ID']}-audit"

    def granted(kind: str, name: str, operation: str) -> bool:
        return any(
            principal == "User:worker" and rule_kind == kind and permission == "ALLOW"
            and op == operation
            and (rule_name == name if pattern == "LITERAL" else name.startswith(rule_name))
            for principal, rule_kind, rule_name, pattern, op, permission in acl_job_rules(services)
        )  # fmt: skip

    assert granted("GROUP", audit_group, "READ")
    assert granted("TRANSACTIONAL_ID", f"{audit_group}-0", "WRITE")
    # its own internal topics, e.g. the incident tallies' changelog
    assert granted("TOPIC", f"{audit_group}-incident-tallies-changelog", "CREATE")
    assert granted("TOPIC", f"{audit_group}-incident-tallies-changelog", "WRITE")


# ------------------------------------------------------------------ env vars and secrets


def test_every_loopguard_variable_is_read_by_settings():
    known = settings_env_names()
    assert {"LOOPGUARD_BROKER", "LOOPGUARD_DB_URL", "LOOPGUARD_PARTITIONS"} <= known
    build_time = {"LOOPGUARD_COMPILE"}  # read by setup.py while building the image's wheel
    setup_py = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert all(f'"{name}"' in setup_py for name in build_time)
    known |= build_time
    for path in (COMPOSE_FILE, ENV_EXAMPLE, DOCKERFILE):
        used = set(re.findall(r"LOOPGUARD_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
        assert used <= known, f"{path.name}: not read by streams/settings.py: {used - known}"


def test_compose_variables_are_listed_in_env_example():
    listed = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    used = {name for value in strings(load_raw()) for name in referenced_variables(value)}
    assert used <= listed, f"missing from .env.example: {used - listed}"


def test_postgres_password_is_required():
    with pytest.raises(MissingVariable, match="POSTGRES_PASSWORD"):
        interpolate_tree(load_raw(), {})
    example = dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE.read_text(), re.MULTILINE))
    assert example["POSTGRES_PASSWORD"] == ""  # the example holds no secret...
    for name in KAFKA_PASSWORDS:
        assert example[name] == "", name
        with pytest.raises(MissingVariable, match=name):  # each one is required
            interpolate_tree(load_raw(), {k: v for k, v in TEST_ENV.items() if k != name})
    with pytest.raises(MissingVariable):  # ...so a copied example refuses to start as-is
        interpolate_tree(load_raw(), example)
    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME"):
        assert f"LOOPGUARD_{name}" in example


_SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|CREDENTIAL|JAAS", re.IGNORECASE)
_PURE_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


def test_no_secret_literal_in_compose():
    raw = load_raw()
    for name, svc in raw["services"].items():
        for key, value in environment(svc).items():
            if "JAAS" in key:  # a JAAS line: every password in it is a ${VARIABLE}
                for secret in re.findall(r'(?:password|user_\w+)="([^"]*)"', value):
                    match = _PURE_REFERENCE.fullmatch(secret)
                    assert match and match["op"] not in (":-", "-"), f"{name}.{key}"
            elif _SECRET_KEY.search(key):
                match = _PURE_REFERENCE.fullmatch(value)
                assert match, f"{name}.{key} must be a ${{VARIABLE}}, not a literal"
                if match["op"] in (":-", "-"):
                    assert match["arg"] == "", f"{name}.{key} has a default secret"
            for userinfo in re.finditer(r"://([^/@:]*):([^/@]*)@", mask_references(value)):
                assert userinfo[2] == "{ref}", f"{name}.{key}: password in the URL"
    text = mask_references(COMPOSE_FILE.read_text(encoding="utf-8"))
    # a password is a ${VARIABLE}, or a shell variable of a job set from one
    literal = re.search(r"(?i)password[\"']?\s*[=:]\s*(?!\{ref\}|\$[A-Za-z_{])[^\s\"']", text)
    assert not literal, literal


# ------------------------------------------------------------------ Kafka (KRaft)


def test_kraft_cluster(services):
    brokers = kafka_services(services)
    assert len(brokers) >= 3
    envs = {name: environment(svc) for name, svc in brokers.items()}
    node_ids = {name: int(env["KAFKA_NODE_ID"]) for name, env in envs.items()}
    assert len(set(node_ids.values())) == len(node_ids), "node ids must be unique"
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1
    for name, svc in brokers.items():
        assert svc["image"].startswith("apache/kafka:")
        assert "healthcheck" in svc
        assert any(v.endswith(":/var/lib/kafka/data") for v in svc.get("volumes", []))
        env = envs[name]
        assert env["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
        roles = set(env["KAFKA_PROCESS_ROLES"].split(","))
        assert roles <= {"broker", "controller"} and roles

        controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
        protocol_map = dict(
            p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        bound = listeners(env["KAFKA_LISTENERS"])
        assert set(bound) <= set(protocol_map)
        if "controller" in roles:
            assert controller in bound
        if "broker" in roles:
            advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
            inter = env["KAFKA_INTER_BROKER_LISTENER_NAME"]
            assert inter in bound and inter in advertised
            assert controller not in advertised
            assert set(advertised) <= set(bound)
            assert advertised[inter][0] in (name, svc.get("hostname"))

        # the quorum: same voters everywhere, each voter a controller of this file
        voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS") or env.get(
            "KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"
        )
        assert voters, f"{name}: no controller.quorum.voters / bootstrap.servers"
        for voter in voters.split(","):
            node, _, address = voter.rpartition("@")
            host, port = address.rsplit(":", 1)
            assert host in envs, f"{name}: voter {voter} is not a service"
            voter_env = envs[host]
            assert "controller" in voter_env["KAFKA_PROCESS_ROLES"].split(",")
            assert listeners(voter_env["KAFKA_LISTENERS"])[controller][1] == int(port)
            if node:
                assert int(node) == node_ids[host]
    controllers = [n for n, e in envs.items() if "controller" in e["KAFKA_PROCESS_ROLES"]]
    assert len(controllers) % 2 == 1 and len(controllers) >= 3
    assert len({e.get("KAFKA_CONTROLLER_QUORUM_VOTERS") for e in envs.values()}) == 1


def test_kafka_durability(services):
    for name, svc in kafka_services(services).items():
        env = environment(svc)
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2", name
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3", name
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2", name
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", name


# ------------------------------------------------------------------ image


def test_dockerfile_installs_the_project(services):
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    for svc in (*worker_services(services).values(), services["migrate"]):
        context = (COMPOSE_DIR / svc["build"]["context"]).resolve()
        assert context == ROOT
        assert (context / svc["build"]["dockerfile"]).resolve() == DOCKERFILE.resolve()

    copied = set()
    for line in re.findall(r"^COPY\s+(?!--from=)(.+)$", text, re.MULTILINE):  # from the context
        *sources, _dest = line.split()
        for source in sources:
            if not source.startswith("--"):
                assert (ROOT / source).exists(), f"COPY {source}: not in the build context"
                copied.add(source.rstrip("/"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "pyproject.toml" in copied
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert package in copied, f"package {package} not copied"

    assert "requirements.lock" in copied, "dependencies come from the lock file"
    assert re.search(r"pip install --require-hashes -r requirements\.lock\b", text)
    editable = re.search(r"pip install\b[^\n]*(?:-e|--editable)\s+\.", text)
    assert editable or re.search(r"pip (?:install|wheel)\b[^\n]*\s\.(\s|$)", text)
    # the gateway client's distribution, which the project depends on, beside it
    assert "clients/python" in copied, "the loopguard-client distribution is not copied"
    assert re.search(r"pip (?:install|wheel)\b[^\n]*\s\./clients/python(\s|$)", text)
    if not editable:  # a regular install must carry the schemas as package data (the client's)
        assert re.search(r"LOOPGUARD_COMPILE=1 pip wheel\b", text), "wheel with the compiled core"
        assert "setup.py" in copied, "setup.py compiles the core"
        client = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text("utf-8"))
        package_data = client["tool"]["setuptools"].get("package-data", {})
        assert any("avsc" in str(p) for p in package_data.values()), "schemas not packaged"
    schema_dir = SCHEMA_DIR.relative_to(ROOT).as_posix()
    assert schema_dir in copied, "streams/wire/schema_registry.py reads the schemas from the tree"
    assert re.search(r"^USER\s+(?!root)\S+", text, re.MULTILINE), "run as a non-root user"


# ------------------------------------------------------------------ docker compose, if any


def _docker_compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _docker_compose_available(), reason="no `docker compose` plugin")
def test_docker_compose_config_accepts_the_file():
    env = {**os.environ, **TEST_ENV}
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------- the same Kafka as the tested cluster


def test_compose_runs_the_kafka_version_and_settings_the_tests_run_on(services):
    kafka_profile = Settings.for_profile("kafka")
    for name, svc in services.items():
        image = svc.get("image", "")
        if image.startswith("apache/kafka:"):
            assert image == f"apache/kafka:{DEFAULT_VERSION}", name
    env = services["kafka-1"]["environment"]
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == str(kafka_profile.replication)
    assert env["KAFKA_MIN_INSYNC_REPLICAS"] == str(kafka_profile.min_insync_replicas)
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == str(kafka_profile.min_insync_replicas)
    # Workers run the profile's exactly once: transactions, replicated like the topics.
    assert kafka_profile.processing_guarantee == "exactly_once"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == str(kafka_profile.replication)
    for worker in worker_services(services).values():
        worker_env = worker["environment"]
        assert worker_env["LOOPGUARD_BROKER_PROFILE"] == "kafka"
        assert "LOOPGUARD_PRODUCER_MAX_BATCH" not in worker_env, "the profile sets batching"
        assert "LOOPGUARD_PROCESSING_GUARANTEE" not in worker_env, "guarantee by profile"
        assert worker_env["LOOPGUARD_MIN_INSYNC_REPLICAS"] == str(kafka_profile.min_insync_replicas)
    script = services["topics"]["command"][0]
    assert "min.insync.replicas=2" in script
    events_size = 2 * Settings().max_message_bytes
    assert re.search(rf"create loopguard\.events .* max\.message\.bytes={events_size}\b", script)


# ------------------------------------------------ the control plane: SASL and ACLs (issue 26)


def kafka_properties(env: dict[str, str]) -> dict[str, str]:
    """server.properties as the apache/kafka image writes it from KAFKA_* variables:
    ``___`` is ``-``, ``__`` is ``_``, ``_`` is ``.``, lower case."""
    props = {}
    for key, value in env.items():
        if key.startswith("KAFKA_"):
            name = key[len("KAFKA_") :].replace("___", "-").replace("__", "\0")
            props[name.replace("_", ".").replace("\0", "_").lower()] = value
    return props


def test_every_listener_authenticates_and_the_authorizer_is_on(services):
    for name, svc in kafka_services(services).items():
        props = kafka_properties(environment(svc))
        protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
        bound = listeners(props["listeners"])
        assert {protocols[listener] for listener in bound} == {"SASL_PLAINTEXT"}, name
        assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
        assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
        controller = props["controller.listener.names"].lower()
        assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
        assert props[f"listener.name.{controller}.sasl.enabled.mechanisms"] == "PLAIN"
        for listener in bound:  # each SASL listener has its login module
            mechanism = "plain" if listener.lower() == controller else "scram-sha-512"
            jaas = props[f"listener.name.{listener.lower()}.{mechanism}.sasl.jaas.config"]
            assert jaas.endswith(";") and " required" in jaas
        inter = props["inter.broker.listener.name"].lower()
        assert 'username="broker"' in props[f"listener.name.{inter}.scram-sha-512.sasl.jaas.config"]
        assert (
            'username="controller"' in props[f"listener.name.{controller}.plain.sasl.jaas.config"]
        )
        assert props["authorizer.class.name"].endswith("metadata.authorizer.StandardAuthorizer")
        assert props["allow.everyone.if.no.acl.found"] == "false"
        supers = set(props["super.users"].split(";"))
        assert supers == {"User:controller", "User:broker", "User:admin"}  # never a client
        assert svc["depends_on"]["kafka-format"]["condition"] == "service_completed_successfully"
        health = " ".join(svc["healthcheck"]["test"])
        assert "--command-config" in health and "SASL_PLAINTEXT" in health


def test_scram_users_are_made_at_format_time_for_every_node(services):
    job = services["kafka-format"]
    script = argv(job)[-1]
    env = environment(job)
    volumes = {v.split(":")[1]: v.split(":")[0] for v in job["volumes"]}
    for name, svc in kafka_services(services).items():
        node = environment(svc)["KAFKA_NODE_ID"]
        data = next(v.split(":")[0] for v in svc["volumes"] if v.endswith(":/var/lib/kafka/data"))
        assert volumes[f"/format/{node}"] == data, name
        assert env["CLUSTER_ID"] == environment(svc)["CLUSTER_ID"]
    users = set(re.findall(r"SCRAM-SHA-512=\[name=(\w+),password=\$(\w+)\]", script))
    assert {user for user, _ in users} == {"broker", "admin", "worker", "gateway"}
    for user, variable in users:  # each from its own required variable
        assert env[variable] == KAFKA_PASSWORDS[f"KAFKA_{user.upper()}_PASSWORD"]
    assert "--ignore-formatted" in script and "set -euo pipefail" in script
    assert job.get("restart") == "no"


def acl_job_rules(services) -> set[tuple[str, ...]]:
    """The ``acl PRINCIPAL PERMISSION TYPE NAME PATTERN OP...`` lines of the acls job, one
    tuple per operation, with Kafka's operation names as streams.kafka.acls spells them."""
    job = services["acls"]
    env = environment(job)
    rules = set()
    for line in argv(job)[-1].splitlines():
        match = re.match(r"\s*acl\s+(User:.+)$", line)
        if match:
            principal, permission, kind, name, pattern, *ops = shlex.split(
                shell_expand(match[1], env)
            )
            for op in ops:
                upper = re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper()
                rules.add((principal, kind, name, pattern, upper, permission))
    return rules


def test_the_acls_job_grants_what_streams_kafka_acls_says(services, worker_settings):
    from streams.kafka.acls import fleet_acls

    expected = {
        (r.principal, r.resource_type, r.resource_name, r.pattern, r.operation, r.permission)
        for r in fleet_acls(worker_settings.topics, worker_settings.app_id, "gateway", "worker")
    }
    assert acl_job_rules(services) == expected
    # nobody but the admin super user writes the config topic
    config = worker_settings.topics.config
    writers = [
        r for r in expected if r[1] == "TOPIC" and r[4] == "WRITE" and r[5] == "ALLOW"
        and (r[2] == config or (r[3] == "PREFIXED" and config.startswith(r[2])))
    ]  # fmt: skip
    for principal, *_ in writers:
        assert (principal, "TOPIC", config, "LITERAL", "WRITE", "DENY") in expected
    job = services["acls"]
    assert job["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    for worker in worker_services(services).values():
        assert worker["depends_on"]["acls"]["condition"] == "service_completed_successfully"
    for name in ("topics", "acls"):  # both as the admin principal
        script = argv(services[name])[-1]
        assert 'username="admin"' in script and "--command-config /tmp/admin.properties" in script


def test_workers_require_every_gateways_signing_keys(services):
    """Issue 40: compose's workers refuse unsigned events; the keys come from compose/.env."""
    for worker in worker_services(services).values():
        assert environment(worker)["LOOPGUARD_GATEWAY_KEYS"] == GATEWAY_KEYS
    without = {k: v for k, v in TEST_ENV.items() if k != "LOOPGUARD_GATEWAY_KEYS"}
    with pytest.raises(MissingVariable, match="LOOPGUARD_GATEWAY_KEYS"):
        interpolate_tree(load_raw(), without)
    keys = GatewayKeys.load(GATEWAY_KEYS)
    assert set(keys.rings) == {"gw-1"}
