"""Mutual TLS as each part's identity: the router worker, the operator's commands and the jobs'
producers log in to Apache Kafka with client certificates (an ``SSL`` listener with
``ssl.client.auth=required``, ``StandardAuthorizer`` refusing whatever no ACL grants), each
granted its role's rights for its certificate's principal ``User:CN=<name>``.

The jobs' producers are configured as the tagger configures its own: from the options a job
writes for Spark's connector (``kafka.security.protocol=SSL``, a PEM key store and trust store),
translated by the tagger's option parser. A switch from blue to green routes every event exactly
once from the primary of its event time; the doctor names the certificate's principal; no
private key appears in any log or output.
"""

from __future__ import annotations

from typing import Any

import pytest

from cutover.access import Role
from spark_tagger.options import kafka_params, producer_config
from tests.children import RouterChild
from tests.security.support import (
    CertIdentity,
    SecuredRoute,
    SecureJob,
    assert_no_secret,
    switch_blue_to_green,
)

pytestmark = [pytest.mark.security, pytest.mark.broker]


def _tagger_producer(route: SecuredRoute, job: CertIdentity) -> dict[str, Any]:
    """The producer settings the tagger's sink makes from the job's Spark connector options."""
    return {**producer_config(kafka_params(job.spark_options(route.kafka.ca_file))),
            "queue.buffering.max.messages": 1_000_000}


def test_a_route_runs_end_to_end_with_client_certificates(route: SecuredRoute) -> None:
    router_id, operator, job = (route.cert_identity(r) for r in ("router", "operator", "job"))
    for who, role in ((router_id, Role.ROUTER), (operator, Role.OPERATOR), (job, Role.JOB)):
        route.grant(who, role)
    producer = _tagger_producer(route, job)
    assert producer["ssl.certificate.location"] == producer["ssl.key.location"] == \
        str(job.keystore)
    doctor = route.cli(router_id, "doctor", "--role", "router", "--route", route.route)
    assert doctor.code == 0, doctor.text
    assert doctor.out.startswith(f"User:CN={router_id.user} at {route.kafka.mtls_bootstrap}")
    router = RouterChild(route.write_settings(router_id), route.tmp / "mtls-router.log")
    runs = [doctor]
    try:
        router.wait_started()
        blue = SecureJob(route, "blue", producer_conf=producer)
        green = SecureJob(route, "green", producer_conf=producer)
        status = switch_blue_to_green(route, operator, blue, green, runs)
        assert status["transition"]["state"] == "CLEAR_TO_TEARDOWN"
    finally:
        router.stop()
    assert "Traceback" not in router.text()
    texts = {"router log": router.text(),
             **{f"cutover command {i}": r.text for i, r in enumerate(runs)}}
    assert_no_secret(texts, router_id, operator, job)


def test_the_doctor_names_a_certificate_principal_and_the_acls_it_lacks(
        route: SecuredRoute) -> None:
    """A certificate the brokers trust but no ACL names: it connects, and the doctor lists
    each missing right with the ``kafka-acls.sh`` line for ``User:CN=<name>``."""
    who = route.cert_identity("router")
    run = route.cli(who, "doctor", "--role", "router", "--route", route.route)
    assert run.code == 1, run.text
    assert run.out.startswith(f"User:CN={who.user} at {route.kafka.mtls_bootstrap}")
    assert "MISSING" in run.out
    assert f"--allow-principal User:CN={who.user} --operation Read --topic {route.control}" \
        in run.out
    assert "Traceback" not in run.text
