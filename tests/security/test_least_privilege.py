"""Least privilege, proven on a broker that refuses whatever no ACL grants.

Each role's identity holds exactly its row of the access table (docs/security.md, "Access
control"; ``cutover doctor`` finds every right granted and nothing more), and the broker
refuses each of them what the table does not grant: a job cannot touch the control topic, a
router cannot publish a plan, an operator cannot write the output.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from cutover.access import Role, required_rights
from testground.brokers import end_offsets
from tests.security.support import Identity, SecuredRoute, assert_no_secret

pytestmark = [pytest.mark.security, pytest.mark.broker]


def _doctor(route: SecuredRoute, who: Identity, role: Role) -> dict:
    run = route.cli(who, "doctor", "--role", role.value, "--json")
    assert run.code == 0, run.text
    return json.loads(run.out)


def test_each_identity_holds_exactly_its_row_of_the_table(route: SecuredRoute) -> None:
    for who, role in ((route.router, Role.ROUTER), (route.operator, Role.OPERATOR),
                      (route.job, Role.JOB)):
        report = _doctor(route, who, role)
        rows = required_rights(route.settings(who), role)
        assert report["principal"] == who.principal
        assert [c["right"]["operation"] for c in report["checks"]] == \
            [r.operation.value for r in rows]
        assert all(c["granted"] for c in report["checks"]), report
        assert report["excess"] == [] and report["missing_topics"] == []
        # and the broker holds nothing else for this principal
        bindings = route.kafka.acls_of(who.principal)
        assert sorted((b.name, b.operation.name) for b in bindings) == \
            sorted((r.resource.name, r.operation.name) for r in rows)


def test_doctor_names_a_missing_right_with_the_grant_and_a_right_too_many(
        route: SecuredRoute) -> None:
    router = route.router
    dlq_write = AclBindingFilter(ResourceType.TOPIC, route.dlq, ResourcePatternType.LITERAL,
                                 router.principal, "*", AclOperation.WRITE,
                                 AclPermissionType.ALLOW)
    admin = route.kafka.admin()
    assert len(admin.delete_acls([dlq_write])[dlq_write].result(timeout=30)) == 1
    route.kafka.grant([required_rights(route.settings(route.operator), Role.OPERATOR)[0]
                       .binding(router.principal)])  # Write on the control topic
    run = route.cli(router, "doctor")
    assert run.code == 1, run.text
    assert f"MISSING Write     topic {route.dlq}" in run.out
    assert (f"--add --allow-principal {router.principal} --operation Write --topic {route.dlq}"
            in run.out)
    assert f"more than the router role needs: Write on topic {route.control}" in run.out
    n = len(required_rights(route.settings(router), Role.ROUTER))   # 13 with transactions
    # Without Write (which implies Describe) the topic cannot be described, so its
    # DescribeConfigs, still granted, cannot be seen either: both are reported.
    assert f"MISSING DescribeConfigs topic {route.dlq}" in run.out
    assert f"{n - 2} of {n} rights granted, 2 missing, 1 resources with more than needed" \
        in run.out
    assert_no_secret({"doctor output": run.text}, router)


def _refused(route: SecuredRoute, who: Identity, topic: str) -> KafkaError | None:
    errors: list[KafkaError] = []
    p = Producer(route.client_conf(who, **{"log_level": 0, "message.timeout.ms": 15000}))
    p.produce(topic, b"x", b"k", on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    return errors[0]


def test_the_broker_refuses_every_write_the_table_does_not_grant(route: SecuredRoute) -> None:
    not_granted = [
        (route.job, [route.control, route.status, route.output, route.dlq, route.checkpoints]),
        (route.router, [route.control, *route.inputs]),
        (route.operator, [route.output, route.status, *route.inputs]),
    ]
    before = {t: sum(end_offsets(route.super_conf["bootstrap.servers"], t,
                                 extra=route.super_conf).values())
              for t in (route.control, route.status, route.output, *route.inputs)}
    for who, topics in not_granted:
        for topic in topics:
            err = _refused(route, who, topic)
            assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
                f"{who.user} wrote {topic}: {err}"
    after = {t: sum(end_offsets(route.super_conf["bootstrap.servers"], t,
                                extra=route.super_conf).values()) for t in before}
    assert after == before  # nothing landed
