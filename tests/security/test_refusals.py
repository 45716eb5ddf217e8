"""What each refusal reads like to the operator: one sentence, no traceback, nothing lost.

A job's identity may not publish a plan; a command whose identity may not read the status
topic says so at once (it used to time out after 30 s, or report the route as unknown); an
expired or untrusted broker certificate is named as such.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import KafkaError, Producer

from cutover.access import Operation, Resource, ResourceKind, Right, Role, required_rights
from cutover.plan import CutoverPlan, Segment, utcnow
from testground.brokers import end_offsets
from testground.throwaway_pki import ThrowawayCA
from tests.children import VENV_BIN
from tests.security.support import Identity, SecuredRoute, assert_no_secret

pytestmark = [pytest.mark.security, pytest.mark.broker]


def _control_end(route: SecuredRoute) -> int:
    return sum(end_offsets(route.super_conf["bootstrap.servers"], route.control,
                           extra=route.super_conf).values())


def test_a_job_identity_writing_the_control_topic_is_refused_by_the_broker(
        route: SecuredRoute) -> None:
    plan = CutoverPlan(route=route.route, epoch=1, issued_at=utcnow(), issued_by="job",
                       segments=(Segment(from_event_time=None, primary="rogue"),))
    errors: list[KafkaError] = []
    producer = Producer(route.client_conf(route.job, log_level=0))
    producer.produce(route.control, plan.to_json(), route.route.encode(),
                     on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The operator's commands, run with the job's credentials, say why in one sentence.
    run = route.cli(route.job, "switch", "--route", route.route, "--to", "green", "--force")
    assert run.code == 3, run.text
    assert run.err.startswith(f"cutover switch: the broker refused user '{route.job.user}' "
                              f"access to topic {route.status} (Broker: Topic authorization "
                              "failed); grant it the rights its role has in docs/security.md, "
                              '"Access control"'), run.err
    assert "Traceback" not in run.text
    assert _control_end(route) == 0  # nothing reached the control topic


def test_an_identity_that_may_read_but_not_write_the_control_topic_is_told_so(
        route: SecuredRoute) -> None:
    viewer = route.identity("viewer")
    route.kafka.grant(Right(resource=Resource(kind=ResourceKind.TOPIC, name=t),
                            operation=Operation.READ, why="look").binding(viewer.principal)
                      for t in (route.control, route.status))
    run = route.cli(viewer, "plan", "init", "--route", route.route, "--primary", "blue")
    assert run.code == 3, run.text
    assert (f"the broker refused to let user '{viewer.user}' publish the plan to "
            f"{route.control} (Broker: Topic authorization failed); only the operators' "
            "identity may write it") in run.err
    assert _control_end(route) == 0


@pytest.mark.parametrize("rights", ["none", "describe only"])
@pytest.mark.parametrize("command", ["status", "wait"])
def test_a_status_reader_without_read_rights_gets_a_sentence_not_a_hang(
        route: SecuredRoute, rights: str, command: str) -> None:
    viewer = route.identity("viewer")
    if rights == "describe only":
        route.kafka.grant(Right(resource=Resource(kind=ResourceKind.TOPIC, name=t),
                                operation=Operation.DESCRIBE, why="see").binding(
                                    viewer.principal) for t in (route.control, route.status))
    args = ["--route", route.route] + (["--timeout", "5m"] if command == "wait" else [])
    run = route.cli(viewer, command, *args, timeout=60)
    assert run.code == 3, run.text
    assert run.err.startswith(f"cutover {command}: the broker refused user '{viewer.user}' "
                              f"access to topic {route.status} ("), run.err
    assert "Topic authorization failed" in run.err
    grant = ('grant it the rights its role has in docs/security.md, "Access control"'
             if rights == "none"
             else f"grant it Read on {route.status}")
    assert grant in run.err, run.err
    assert "Traceback" not in run.text
    assert_no_secret({"output": run.text}, viewer)


@pytest.mark.parametrize("refusal", ["expired certificate", "untrusted certificate",
                                     "wrong password"])
def test_a_refused_connection_is_named(route: SecuredRoute, refusal: str) -> None:
    over: dict[str, object] = {}
    kafka = route.settings_dict(route.operator)["kafka"]
    who = route.operator
    if refusal == "expired certificate":
        over["bootstrap"] = route.kafka.expired_bootstrap
        want = "presented a certificate that has expired (certificate has expired)"
    elif refusal == "untrusted certificate":
        other = ThrowawayCA(route.tmp / "other-ca", "other-ca")
        over["kafka"] = {**kafka, "ssl.ca.location": str(other.ca_file)}
        want = (f"presented a certificate that is not signed by a CA in ssl.ca.location "
                f"({other.ca_file}) (unable to get local issuer certificate); point "
                "ssl.ca.location at the CA that signed the broker's certificate")
    else:
        who = Identity(route.operator.user, route.tmp / "wrong.secret", env_name="WRONG_PW")
        over["kafka"] = who.kafka_settings(route.kafka.ca_file)
        want = (f"authentication failed: the broker refused the SCRAM-SHA-512 login of user "
                f"'{who.user}' (wrong user name or password)")
    config = route.write_settings(who, f"operator-{refusal.replace(' ', '-')}", **over)
    for command in (["status", "--route", route.route], ["doctor", "--role", "operator"]):
        run = route.cli(who, *command, config=config)
        assert run.code == 3, run.text
        assert want in run.err, run.err
        assert "Traceback" not in run.text
        assert_no_secret({"output": run.text}, route.operator, who)


def test_the_doctor_reports_as_json_what_a_principal_may_do(route: SecuredRoute) -> None:
    run = route.cli(route.job, "doctor", "--role", "job", "--json")
    assert run.code == 0, run.text
    report = json.loads(run.out)
    assert [(c["right"]["resource"]["name"], c["right"]["operation"], c["granted"])
            for c in report["checks"]] == [(route.inputs[0], "Write", True)]


def test_a_router_without_its_rights_stops_with_a_sentence(route: SecuredRoute) -> None:
    bare = route.identity("bare")  # logs in, holds no ACL
    config = route.write_settings(bare)
    done = subprocess.run([str(VENV_BIN / "cutover"), "router", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert (f"router cannot start: the broker refused user '{bare.user}' access to topic "
            f"{route.inputs[0]} (Broker: Topic authorization failed)") in out
    assert "Traceback" not in out
    assert_no_secret({"router output": out}, bare)


def test_a_router_refused_its_transactional_ids_says_what_to_grant(route: SecuredRoute) -> None:
    """Transactions are on by default on Apache Kafka: without the prefix ACL on its
    transactional ids the worker stops at its first partition with the grant to add; the
    doctor names the same right as missing."""
    who = route.identity("notxn")
    route.kafka.grant(r.binding(who.principal)
                      for r in required_rights(route.settings(who), Role.ROUTER)
                      if r.resource.kind is not ResourceKind.TRANSACTIONAL_ID)
    doctor = route.cli(who, "doctor")
    assert doctor.code == 1, doctor.text
    assert f"MISSING Write     transactional-id {route.group}.*" in doctor.out
    assert f"--transactional-id {route.group}. --resource-pattern-type prefixed" in doctor.out
    config = route.write_settings(who)
    done = subprocess.run([str(VENV_BIN / "cutover"), "router", "--config", str(config)],
                          capture_output=True, text=True, timeout=180)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    # a worker's ids are <group_id>.<worker>.<slot>: the prefix is what the grant names
    assert f"the broker refuses this worker the transactional id {route.group}." in out
    assert f"Write on the transactional ids with the prefix '{route.group}.'" in out
    assert "Traceback" not in out and "Traceback" not in doctor.text
    assert_no_secret({"router output": out}, who)
