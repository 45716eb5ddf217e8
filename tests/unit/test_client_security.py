"""The tagger's librdkafka clients take the security options Spark's Kafka connector takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_tagger.options import KafkaOptionError, kafka_params

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _params(**options: str) -> dict[str, str]:
    return kafka_params({"kafka.bootstrap.servers": "k:9093",
                         **{f"kafka.{k.replace('_', '.')}": v for k, v in options.items()}})


def test_java_security_options_become_librdkafka_settings() -> None:
    got = _params(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                  sasl_jaas_config=f'{SCRAM} required username="job" password="p\\"w;x";',
                  ssl_truststore_type="PEM", ssl_truststore_location="/etc/ca.pem")
    assert got == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "job",
                   "sasl.password": 'p"w;x', "ssl.ca.location": "/etc/ca.pem"}


def test_librdkafka_names_and_secret_references_pass(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    got = _params(sasl_username="job", sasl_password=f"${{file:{pw}}}",
                  ssl_ca_location="/ca.pem")
    assert got["sasl.password"] == "from-file" and got["ssl.ca.location"] == "/ca.pem"


@pytest.mark.parametrize(("options", "message"), [
    ({"ssl_truststore_location": "/ts.jks"},
     "option 'kafka.ssl.truststore.type' is JKS; the tagger's Kafka client reads CA "
     "certificates as PEM only"),
    ({"sasl_jaas_config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
                          " required;"},
     "uses OAuthBearerLoginModule without clientId and clientSecret"),
    ({"sasl_jaas_config": "com.example.KerberosLikeModule required;"},
     "uses KerberosLikeModule; the tagger's Kafka client understands the SCRAM, PLAIN and "
     "OAUTHBEARER (OIDC) login modules only"),
    ({"sasl_jaas_config": f'{SCRAM} required username="job";'},
     "option 'kafka.sasl.jaas.config' names no username and password"),
    ({"sasl_jaas_config": "username=job"},
     "option 'kafka.sasl.jaas.config' is not a JAAS login entry"),
])
def test_what_librdkafka_cannot_use_is_refused_by_name(options: dict[str, str],
                                                      message: str) -> None:
    with pytest.raises(KafkaOptionError) as exc:
        _params(**options)
    assert message in str(exc.value)
