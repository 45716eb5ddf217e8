"""The logins of managed Kafka, end to end on Apache Kafka: SASL/OAUTHBEARER with OIDC client
credentials (tokens from a local issuer, validated by the brokers against its JWKS) and
SASL/PLAIN over TLS.

The router, the operator's commands and the (emulated) tagged jobs of a route each log in with
their own identity; settings hold only references to the secrets (``${file:}``, ``${env:}``).
The output holds every event exactly once from the primary of its event time, the doctor names
the principal the broker sees, and no secret appears anywhere. A client secret the issuer
refuses, a token the broker refuses and Kerberos are each told in one sentence.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import yaml

from cutover.access import Role
from tests.children import RouterChild
from tests.security.oidc_issuer import OidcIssuer
from tests.security.support import (
    Identity,
    PlainUser,
    SecuredRoute,
    SecureJob,
    assert_no_secret,
    switch_blue_to_green,
)

pytestmark = [pytest.mark.security, pytest.mark.broker]


def _identities(route: SecuredRoute, login: str, oidc: OidcIssuer, plain: PlainUser
                ) -> tuple[Identity, Identity, Identity]:
    """Router, operator and job: all OIDC clients (the operator's secret from the
    environment), or the router as the PLAIN user beside the route's SCRAM operator and job."""
    if login == "oauthbearer-oidc":
        ids = (route.oauth_identity(oidc, "router"),
               route.oauth_identity(oidc, "operator", env=True),
               route.oauth_identity(oidc, "job"))
        for who, role in zip(ids, (Role.ROUTER, Role.OPERATOR, Role.JOB), strict=True):
            route.grant(who, role)
        return ids
    router = route.plain_identity(plain)
    route.grant(router, Role.ROUTER)
    return router, route.operator, route.job


@pytest.mark.parametrize("login", ["oauthbearer-oidc", "plain-tls"])
def test_a_route_runs_end_to_end_with_a_managed_kafka_login(
        route: SecuredRoute, oidc: OidcIssuer, plain_user: PlainUser, login: str) -> None:
    router_id, operator, job = _identities(route, login, oidc, plain_user)
    doctor = route.cli(router_id, "doctor", "--role", "router", "--route", route.route)
    assert doctor.code == 0, doctor.text
    assert doctor.out.startswith(f"User:{router_id.user} at {route.settings(router_id).bootstrap}")
    router = RouterChild(route.write_settings(router_id), route.tmp / f"{login}.log")
    runs = [doctor]
    try:
        router.wait_started()
        blue, green = SecureJob(route, "blue", job), SecureJob(route, "green", job)
        switch_blue_to_green(route, operator, blue, green, runs)
    finally:
        router.stop()
    assert "Traceback" not in router.text()
    if login == "oauthbearer-oidc":  # every part got its token from the issuer
        assert all(oidc.issued[who.user] >= 1 for who in (router_id, operator, job))
    texts = {"router log": router.text(),
             **{f"cutover command {i}": r.text for i, r in enumerate(runs)}}
    assert_no_secret(texts, router_id, operator, job)


def test_the_doctor_names_a_client_secret_the_issuer_refuses(
        route: SecuredRoute, oidc: OidcIssuer) -> None:
    who = route.oauth_identity(oidc, "router")
    right = who.password
    who.write_secret(secrets.token_urlsafe(24))
    run = route.cli(who, "doctor", "--role", "router")
    assert run.code == 3, run.text
    assert (f"cannot log in as OAuth client '{who.user}': the token endpoint {oidc.token_url} "
            "refused the client credentials (HTTP 401); check sasl.oauthbearer.client.id and "
            "the secret sasl.oauthbearer.client.secret refers to") in run.err
    assert "Traceback" not in run.text and right not in run.text


def test_a_router_whose_token_the_broker_refuses_says_so(
        route: SecuredRoute, tmp_path: Path) -> None:
    """A token from an issuer the brokers do not trust (its own keys): the broker's refusal
    is named, with what to check, and the router keeps retrying without a traceback."""
    with OidcIssuer() as stranger:
        who = route.oauth_identity(stranger, "router")
        router = RouterChild(route.write_settings(who), tmp_path / "untrusted.log")
        try:
            router.wait_for_line("retrying in 2s", timeout=60)
        finally:
            router.stop()
    text = router.text()
    assert (f"authentication failed: the broker refused the OAUTHBEARER token of OAuth client "
            f"'{who.user}'") in text
    assert f"check that the broker trusts the issuer of {stranger.token_url}" in text
    assert "Traceback" not in text and who.password not in text


@pytest.mark.parametrize(("kafka", "sentence"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
      "sasl.kerberos.service.name": "kafka"},
     "Kerberos logins (sasl.mechanism GSSAPI) are not supported by cutover's Kafka clients"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"},
     "AWS IAM logins (AWS_MSK_IAM) are not supported by cutover's Kafka clients; Amazon MSK "
     "also takes SASL/SCRAM"),
])
def test_the_doctor_refuses_kerberos_and_aws_iam_naming_the_logins_that_work(
        route: SecuredRoute, kafka: dict[str, str], sentence: str) -> None:
    path = route.tmp / "unsupported.yaml"
    d = route.settings_dict(route.router)
    d["kafka"] = kafka
    path.write_text(yaml.safe_dump(d))
    run = route.cli(route.router, "doctor", config=path)
    assert run.code == 2, run.text
    assert sentence in run.err and "Traceback" not in run.text

