"""The router asks the broker what it serves with its own client settings: on the secured
Apache Kafka (SASL_SSL, SCRAM-SHA-512, ACLs refusing whatever is not granted) the answer lists
every transaction API; a login the broker refuses is named, with what to check."""

from __future__ import annotations

import secrets

import pytest

from cutover.broker_capabilities import broker_api_keys, missing_transaction_apis
from testground.secure_kafka import SecuredKafka

pytestmark = [pytest.mark.security, pytest.mark.broker]


def test_the_secured_broker_answers_a_logged_in_client_with_every_transaction_api(
        secured: SecuredKafka) -> None:
    user, password = f"probe-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    secured.set_password(user, password)
    keys = broker_api_keys(secured.sasl_conf(user, password))
    assert missing_transaction_apis(keys) == []


def test_a_refused_login_is_named_with_what_to_check(secured: SecuredKafka) -> None:
    user = f"probe-{secrets.token_hex(4)}"
    secured.set_password(user, secrets.token_urlsafe(16))
    with pytest.raises(ConnectionError, match="check the bootstrap address and the client's "
                                              "security settings"):
        broker_api_keys(secured.sasl_conf(user, "not-the-password"), timeout=3.0)
