"""The secured Apache Kafka of the security suite: started once per session, on loopback.

It runs whatever broker the rest of the suite uses (``CUTOVER_TEST_BROKER``), since the
embedded broker has no authentication or authorisation to test. Beside SCRAM, it takes
SASL/OAUTHBEARER logins whose JWTs come from a local OIDC issuer (:mod:`.oidc_issuer`) and
SASL/PLAIN logins of one user, both over TLS, and clients by their certificate (mutual TLS).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from testground.secure_kafka import OidcTrust, SecuredKafka, secured_kafka
from tests.security.oidc_issuer import AUDIENCE, ISSUER, OidcIssuer
from tests.security.support import PlainUser, SecuredRoute


@pytest.fixture(scope="session")
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="session")
def plain_user() -> PlainUser:
    return PlainUser("plain-app", secrets.token_urlsafe(24))


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory, oidc: OidcIssuer,
            plain_user: PlainUser) -> Iterator[SecuredKafka]:
    trust = OidcTrust(jwks_url=oidc.jwks_url, issuer=ISSUER, audience=AUDIENCE)
    with secured_kafka(tmp_path_factory.mktemp("secured-kafka"), oidc=trust,
                       plain_users={plain_user.user: plain_user.password}, mtls=True) as kafka:
        yield kafka


@pytest.fixture
def route(secured: SecuredKafka, tmp_path: Path) -> SecuredRoute:
    return SecuredRoute(secured, tmp_path)
