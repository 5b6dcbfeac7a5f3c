"""Who may do what on a secured cluster (SASL + ACLs): the ACLs a loopguard fleet needs.

With an authorizer (KRaft's StandardAuthorizer) and no ACL, nobody but a super user may do
anything. These rules give each role what it uses and nothing more (issue 26):

- **gateways** write events and their writer schema, read decisions (the control topic, outside
  any group); they cannot read or write the config topic.
- **workers** read and write the fleet's topics (``PREFIX.``) and their own internal topics
  (``APP_ID-``: the changelogs, Faust's), join their group and use their transactional ids;
  the config topic they may only read: a DENY on writing it beats the prefix's ALLOW.
- the **admin** principal is a super user (``super.users``): it creates topics and ACLs and
  is the only one who may write ``PREFIX.config``.

``compose/`` creates the same rules with ``kafka-acls.sh`` (tests/unit/test_compose.py keeps
them in step), the SASL integration test with :func:`create_acls`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.settings import Topics

ALLOW, DENY = "ALLOW", "DENY"
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
PROBE_TRANSACTIONAL_ID = "loopguard-probe-"
WORKER_TOPIC_OPERATIONS = ("READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")


@dataclass(frozen=True, slots=True)
class AclRule:
    """One ACL: ``principal`` may (or, DENY, may not) do ``operation`` on a resource."""

    principal: str  # "User:name"
    resource_type: str  # TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER
    resource_name: str
    pattern: str  # LITERAL or PREFIXED
    operation: str
    permission: str = ALLOW


def _rules(principal: str, kind: str, name: str, pattern: str, *ops: str) -> list[AclRule]:
    return [AclRule(principal, kind, name, pattern, op) for op in ops]


def gateway_acls(topics: Topics, user: str) -> list[AclRule]:
    """A gateway: write events (and its writer schema), read decisions."""
    who = f"User:{user}"
    return [
        *_rules(who, "TOPIC", topics.events, LITERAL, "WRITE", "DESCRIBE"),
        *_rules(who, "TOPIC", topics.schemas, LITERAL, "READ", "WRITE", "DESCRIBE"),
        *_rules(who, "TOPIC", topics.control, LITERAL, "READ", "DESCRIBE"),
    ]


def topic_prefix(topics: Topics) -> str:
    """``PREFIX.`` of the fleet's topics (``loopguard.`` by default)."""
    return topics.events.rsplit(".", 1)[0] + "."


def worker_acls(topics: Topics, app_id: str, user: str) -> list[AclRule]:
    """A worker: the fleet's topics, its internal topics, group and transactions; the config
    topic read-only."""
    who = f"User:{user}"
    return [
        *_rules(who, "TOPIC", topic_prefix(topics), PREFIXED, *WORKER_TOPIC_OPERATIONS),
        AclRule(who, "TOPIC", topics.config, LITERAL, "WRITE", DENY),
        *_rules(who, "TOPIC", f"{app_id}-", PREFIXED, *WORKER_TOPIC_OPERATIONS),
        *_rules(who, "GROUP", app_id, PREFIXED, "READ", "DESCRIBE"),
        *_rules(who, "TRANSACTIONAL_ID", app_id, PREFIXED, "WRITE", "DESCRIBE"),
        # the start-up check that the broker takes transactions (streams/cli/broker_checks.py)
        *_rules(who, "TRANSACTIONAL_ID", PROBE_TRANSACTIONAL_ID, PREFIXED, "WRITE", "DESCRIBE"),
        *_rules(who, "CLUSTER", "kafka-cluster", LITERAL, "IDEMPOTENT_WRITE", "DESCRIBE"),
    ]


def fleet_acls(topics: Topics, app_id: str, gateway: str, worker: str) -> list[AclRule]:
    return [*gateway_acls(topics, gateway), *worker_acls(topics, app_id, worker)]


def create_acls(admin: Any, rules: list[AclRule]) -> None:
    """Create ``rules`` with a kafka-python admin client authenticated as a super user;
    raises RuntimeError naming the first rule the broker refused."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    acls = [
        ACL(
            principal=rule.principal,
            host="*",
            operation=ACLOperation[rule.operation],
            permission_type=ACLPermissionType[rule.permission],
            resource_pattern=ResourcePattern(
                ResourceType[rule.resource_type],
                rule.resource_name,
                ACLResourcePatternType[rule.pattern],
            ),
        )
        for rule in rules
    ]
    result = admin.create_acls(acls)
    failed = result.get("failed") or []
    if failed:
        acl, error = failed[0]
        raise RuntimeError(f"ACL refused: {acl}: {error}")
