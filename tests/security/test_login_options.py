"""Which logins cutover's Kafka clients make, as settings say them: OIDC client credentials
in librdkafka's names or Spark's connector's, PLAIN over TLS; Kerberos and AWS IAM refused with
a sentence naming the logins that work; a client certificate's principal and a job's key store
(mutual TLS). Pure logic: no broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cutover.certificate_principal import certificate_principal
from cutover.kafka_errors import principal_of, unsupported_login
from cutover.settings import SettingsError, parse_settings
from spark_tagger.options import KafkaOptionError, kafka_params

OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "router",
        "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.token.endpoint.url": "http://t"}


def test_an_oidc_client_credentials_login_is_made_and_named_by_its_client_id() -> None:
    assert unsupported_login(OIDC) is None
    assert principal_of(OIDC) == "OAuth client 'router'"
    assert unsupported_login({"sasl.mechanism": "PLAIN", "security.protocol": "SASL_SSL"}) \
        is None


@pytest.mark.parametrize(("conf", "start", "names"), [
    ({"sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka"},
     "Kerberos logins (sasl.mechanism GSSAPI) are not supported", "SASL/SCRAM"),
    ({"sasl.mechanisms": "aws_msk_iam"},
     "AWS IAM logins (AWS_MSK_IAM) are not supported", "SASL/SCRAM (credentials in AWS "
     "Secrets Manager) and mutual TLS"),
    ({"sasl.mechanism": "OAUTHBEARER",
      "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"},
     "AWS IAM logins (AWS_MSK_IAM) are not supported", "mutual TLS"),
    ({"sasl.mechanism": "OAUTHBEARER"},
     "SASL/OAUTHBEARER needs sasl.oauthbearer.method: oidc", "sasl.oauthbearer.client.id"),
])
def test_logins_the_clients_cannot_make_are_refused_naming_what_works(
        conf: dict[str, str], start: str, names: str) -> None:
    sentence = unsupported_login(conf)
    assert sentence is not None and sentence.startswith(start) and names in sentence


def test_a_job_s_java_oauth_options_become_librdkafka_s_oidc_login(tmp_path: Path) -> None:
    """A job secured for Spark's connector (OAuthBearerLoginModule with client credentials and
    Java's login callback handler) logs in the same way through the tagger's client; the
    secret may be a reference."""
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    got = kafka_params({
        "kafka.bootstrap.servers": "k:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "kafka.sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="job" '
                                  f'clientSecret="{secret.read_text().strip()}" scope="kafka";'})
    assert got == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
                   "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                   "sasl.oauthbearer.client.id": "job",
                   "sasl.oauthbearer.client.secret": "s3cr3t",
                   "sasl.oauthbearer.scope": "kafka"}
    native = kafka_params({"kafka.bootstrap.servers": "k:9093",
                           **{f"kafka.{k}": v for k, v in OIDC.items()},
                           "kafka.sasl.oauthbearer.client.secret": f"${{file:{secret}}}"})
    assert native["sasl.oauthbearer.client.secret"] == "s3cr3t"


@pytest.mark.parametrize("options", [
    {"kafka.sasl.mechanism": "GSSAPI"},
    {"kafka.sasl.mechanism": "AWS_MSK_IAM",
     "kafka.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"},
])
def test_a_job_asking_for_kerberos_or_aws_iam_is_refused(options: dict[str, str]) -> None:
    with pytest.raises(KafkaOptionError) as exc:
        kafka_params({"kafka.bootstrap.servers": "k:9093", **options})
    assert "are not supported by cutover's Kafka clients" in str(exc.value)


def test_settings_with_a_login_the_clients_cannot_make_are_refused_when_read() -> None:
    """The router, every command and the doctor read their settings first: a Kerberos login
    stops there, naming the file and the logins that work, before any client is built."""
    with pytest.raises(SettingsError) as exc:
        parse_settings({"bootstrap": "k:9093", "kafka": {"sasl.mechanism": "GSSAPI"},
                        "routes": [{"name": "r", "inputs": ["r.raw"], "output": "r.out"}]},
                       "router.yaml")
    assert str(exc.value).startswith("router.yaml: kafka: Kerberos logins (sasl.mechanism "
                                     "GSSAPI) are not supported")
    assert "SASL/OAUTHBEARER with OIDC client credentials" in str(exc.value)


def _certificate(tmp_path: Path, subject: list[tuple[Any, str]]) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in subject])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    path = tmp_path / "client.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.mark.parametrize("subject", [
    [(NameOID.COMMON_NAME, "cutover-router")],
    [(NameOID.COUNTRY_NAME, "DE"), (NameOID.ORGANIZATION_NAME, "Example, Inc."),
     (NameOID.ORGANIZATIONAL_UNIT_NAME, "streaming"), (NameOID.COMMON_NAME, "router #1")],
])
def test_a_client_certificate_s_principal_is_its_subject_as_kafka_writes_it(
        tmp_path: Path, subject: list[tuple[Any, str]]) -> None:
    """Kafka's default principal of a TLS client is ``User:`` + the subject in RFC 2253 form
    (most specific name first), which is what ACLs must name."""
    path = _certificate(tmp_path, subject)
    expected = x509.load_pem_x509_certificate(path.read_bytes()).subject.rfc4514_string()
    conf = {"security.protocol": "SSL", "ssl.certificate.location": str(path)}
    assert certificate_principal(conf) == f"User:{expected}"
    assert principal_of(conf) == f"the certificate of {expected!r}"
    assert certificate_principal({"ssl.certificate.pem": path.read_text()}) == f"User:{expected}"
    assert certificate_principal({"ssl.certificate.location": str(tmp_path / "none")}) is None


def test_a_job_s_pem_key_store_becomes_librdkafka_s_certificate_and_key() -> None:
    got = kafka_params({"kafka.bootstrap.servers": "k:9093", "kafka.security.protocol": "SSL",
                        "kafka.ssl.truststore.type": "PEM",
                        "kafka.ssl.truststore.location": "/etc/ca.pem",
                        "kafka.ssl.keystore.type": "PEM",
                        "kafka.ssl.keystore.location": "/etc/job.pem"})
    assert got == {"bootstrap.servers": "k:9093", "security.protocol": "SSL",
                   "ssl.ca.location": "/etc/ca.pem", "ssl.key.location": "/etc/job.pem",
                   "ssl.certificate.location": "/etc/job.pem"}
    inline = kafka_params({"kafka.bootstrap.servers": "k:9093", "kafka.ssl.keystore.type": "PEM",
                           "kafka.ssl.keystore.key": "KEY", "kafka.ssl.keystore.certificate.chain":
                           "CHAIN"})
    assert inline["ssl.key.pem"] == "KEY" and inline["ssl.certificate.pem"] == "CHAIN"
    pkcs12 = kafka_params({"kafka.bootstrap.servers": "k:9093",
                           "kafka.ssl.keystore.type": "PKCS12",
                           "kafka.ssl.keystore.location": "/etc/job.p12",
                           "kafka.ssl.keystore.password": "pw"})
    assert pkcs12["ssl.keystore.location"] == "/etc/job.p12"
    assert "ssl.keystore.type" not in pkcs12


def test_a_job_s_jks_key_store_is_refused_naming_the_conversion() -> None:
    with pytest.raises(KafkaOptionError) as exc:
        kafka_params({"kafka.bootstrap.servers": "k:9093",
                      "kafka.ssl.keystore.location": "/etc/job.jks"})
    assert str(exc.value).startswith("option 'kafka.ssl.keystore.type' is JKS")
    assert "keytool -importkeystore -deststoretype PKCS12" in str(exc.value)
