"""``cutover tag`` on the secured broker: a real PySpark job, secured with the options Spark's
Kafka connector takes (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``, a PEM ``kafka.ssl.truststore``), read through the Python Kafka
source and written through the tagging sink, logged in as the route's job identity, which may
write its raw topic only (and read its own input): a SCRAM user, an OIDC client whose job
options are those of Spark's connector (``OAuthBearerLoginModule`` with client credentials), or
a client certificate (mutual TLS: ``kafka.security.protocol=SSL`` with a PEM key store)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cutover.access import Operation, Resource, ResourceKind, Right, Role
from cutover.headers import parse_headers
from testground.brokers import create_topics
from tests.security.oidc_issuer import OidcIssuer
from tests.security.support import SecuredRoute, assert_no_secret
from tests.spark.spark_test_support import REPO, spark_env, tag_command

pytestmark = [pytest.mark.security, pytest.mark.broker, pytest.mark.spark]

JOB = Path(__file__).resolve().parent / "jobs" / "secure_relay.py"
ORDERS = 60


# SCRAM in the default suite; the other two logins' real Spark jobs in ``make test-all`` (each
# login is in the default suite at the router, CLI and job-producer level: test_managed_logins,
# test_mutual_tls), to keep ``make test`` within CI's time.
@pytest.mark.parametrize("login", ["scram",
                                   pytest.param("oauthbearer-oidc", marks=pytest.mark.slow),
                                   pytest.param("mtls", marks=pytest.mark.slow)])
def test_a_tagged_job_reads_and_writes_over_tls(route: SecuredRoute, oidc: OidcIssuer,
                                                tmp_path: Path, login: str) -> None:
    job = route.job
    bootstrap = route.kafka.bootstrap
    login_args = ["--user", job.user, "--password-file", str(job.secret_file)]
    if login == "oauthbearer-oidc":
        job = route.oauth_identity(oidc, "job")
        route.grant(job, Role.JOB)
        bootstrap = route.kafka.oauth_bootstrap
        login_args = ["--user", job.user, "--password-file", str(job.secret_file),
                      "--token-url", oidc.token_url]
    elif login == "mtls":
        job = cert = route.cert_identity("job")
        route.grant(job, Role.JOB)
        bootstrap, login_args = route.kafka.mtls_bootstrap, ["--keystore", str(cert.keystore)]
    source = f"{route.name}.orders"
    create_topics(route.super_conf["bootstrap.servers"], {source: 2}, extra=route.super_conf)
    route.kafka.grant([Right(resource=Resource(kind=ResourceKind.TOPIC, name=source),
                             operation=Operation.READ, why="the job's own input")
                       .binding(job.principal)])
    producer = Producer(route.super_conf)
    for i in range(ORDERS):
        order = {"order_id": f"o{i}", "amount": i * 1.5, "ts": 1_767_225_600_000 + i * 100}
        producer.produce(source, json.dumps(order).encode(), f"c{i % 7}".encode())
    assert producer.flush(30) == 0
    log = tmp_path / "tag.log"
    cmd = tag_command("blue", JOB, [
        "--bootstrap", bootstrap, "--input", source, "--output", route.inputs[0],
        "--checkpoint", str(tmp_path / "ckpt"), "--ca-file", str(route.kafka.ca_file),
        *login_args],
        flags=["--kafka-source", "python"])
    with log.open("wb") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=spark_env(),
                              cwd=REPO, timeout=300)
    text = log.read_text(errors="replace")
    assert done.returncode == 0, text[-4000:]
    records = route.read(route.inputs[0])
    data = [m for m in records if m.value()]
    beats = [m for m in records if not m.value()]
    assert len(data) == ORDERS
    assert {m.partition() for m in beats} == set(range(route.partitions))
    for m in data:
        tagged = parse_headers(m.headers())
        order = json.loads(m.value())
        assert tagged.version == "blue" and tagged.event_time == order["ts"]
    assert "Traceback" not in text
    assert_no_secret({"cutover tag output": text}, job)
    if login == "oauthbearer-oidc":
        assert oidc.issued[job.user] >= 1
