"""What a refused Kafka client was told, as one sentence an operator can act on.

librdkafka answers every failed connection with "Broker transport failure" and sends the real
cause (a refused SASL login, a certificate that failed verification) to the error callback,
and for a certificate it does not say *why* verification failed: an expired certificate and
one signed by an unknown CA read the same. :class:`ClientErrors` keeps what the callback said;
:func:`explain_connect_failure` turns it into a sentence, and for a failed verification
repeats the TLS handshake with Python's ``ssl`` (the same OpenSSL) to name the reason:
"certificate has expired", "not signed by a CA in ssl.ca.location", a host name mismatch.

A principal refused a right on a topic gets a sentence naming the topic and what to grant
(:func:`denial`, :func:`topic_denial`). No message here ever holds a secret: they name
settings, users, addresses and files, and librdkafka's texts hold none.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ClusterMetadata

from cutover.certificate_principal import certificate_principal


class ClientErrors:
    """An ``error_cb`` (call the client's ``poll``) and a ``logger`` for one client: keeps
    the errors it reports and its last connection failure, instead of logging a line per
    attempt; the caller says what they mean, once."""

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []
        self.last_failure: str | None = None

    def __call__(self, err: KafkaError) -> None:
        self.errors.append(err)

    def log(self, level: int, fmt: str, *args: Any) -> None:
        """librdkafka's log callback: ``log(level, "%s [%s] %s", facility, client, text)``."""
        if args and args[0] == "FAIL":
            self.last_failure = str(args[-1])

    def first(self, code: int) -> KafkaError | None:
        return next((e for e in self.errors if e.code() == code), None)

    def refused(self) -> bool:
        """Whether the broker refused the login or the certificate (retrying will not help
        until someone changes a setting)."""
        return any(e.code() in _REFUSALS for e in self.errors)


_REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL)


def list_topics(admin: AdminClient, errors: ClientErrors, timeout: float) -> ClusterMetadata:
    """``admin.list_topics``, but over as soon as ``errors`` (the client's ``error_cb``) holds
    a refused login or certificate: librdkafka would wait out the whole timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except KafkaException:
            admin.poll(0)
            if errors.refused() or time.monotonic() >= deadline:
                raise


def mechanism_of(conf: Mapping[str, Any]) -> str:
    """The SASL mechanism the client logs in with (upper case), or ``""``."""
    return str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "").strip().upper()


def principal_of(conf: Mapping[str, Any]) -> str:
    """How the client identifies itself, for messages: ``user 'router'``, ``OAuth client
    'router'``, ``the certificate of 'CN=router'`` or the protocol."""
    mechanism = mechanism_of(conf)
    if mechanism == "OAUTHBEARER":
        client = conf.get("sasl.oauthbearer.client.id")
        return f"OAuth client {client!r}" if client else "an OAUTHBEARER client"
    user = conf.get("sasl.username")
    if user:
        return f"user {user!r}"
    if not mechanism and (conf.get("ssl.certificate.location") or conf.get("ssl.certificate.pem")):
        who = certificate_principal(conf)
        return (f"the certificate of {who.removeprefix('User:')!r}" if who
                else "a client certificate that cannot be read")
    return f"an unauthenticated {str(conf.get('security.protocol', 'PLAINTEXT')).upper()} client"


SUPPORTED_LOGINS = ("SASL/SCRAM, SASL/PLAIN over TLS, SASL/OAUTHBEARER with OIDC client "
                    "credentials (sasl.oauthbearer.method: oidc) or mutual TLS")


def unsupported_login(conf: Mapping[str, Any]) -> str | None:
    """A sentence for a login cutover's Kafka clients (librdkafka, as the wheel builds it)
    cannot make, naming what to use instead; None when the login is one they make."""
    mechanism = mechanism_of(conf)
    jaas = str(conf.get("sasl.jaas.config") or "")
    if mechanism == "GSSAPI":
        return ("Kerberos logins (sasl.mechanism GSSAPI) are not supported by cutover's Kafka "
                "clients (their librdkafka has no Kerberos); give cutover's identities "
                f"{SUPPORTED_LOGINS} instead")
    if mechanism == "AWS_MSK_IAM" or "IAMLoginModule" in jaas or (
            mechanism == "OAUTHBEARER" and "IAMOAuthBearerLoginCallbackHandler"
            in str(conf.get("sasl.login.callback.handler.class") or "")):
        return ("AWS IAM logins (AWS_MSK_IAM) are not supported by cutover's Kafka clients; "
                "Amazon MSK also takes SASL/SCRAM (credentials in AWS Secrets Manager) and "
                "mutual TLS: enable one of them on the cluster for cutover's identities")
    if mechanism == "OAUTHBEARER" and str(conf.get("sasl.oauthbearer.method") or
                                          "default").lower() != "oidc":
        return ("SASL/OAUTHBEARER needs sasl.oauthbearer.method: oidc with "
                "sasl.oauthbearer.token.endpoint.url, sasl.oauthbearer.client.id and "
                "sasl.oauthbearer.client.secret (the OIDC client-credentials login); the "
                "unsecured default method is for tests only")
    return None


def _first_address(conf: Mapping[str, Any]) -> tuple[str, int]:
    first = str(conf.get("bootstrap.servers", "")).split(",")[0].strip()
    first = first.split("://")[-1]
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "localhost", int(port or 9092)


def diagnose_tls(conf: Mapping[str, Any], timeout: float = 5.0) -> str:
    """Why the broker's certificate fails verification, found by a TLS handshake of our own
    with the client's CA file and host-name rule."""
    host, port = _first_address(conf)
    ca = conf.get("ssl.ca.location")
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    context.check_hostname = str(conf.get("ssl.endpoint.identification.algorithm",
                                          "https")).lower() == "https"
    where = f"the broker at {host}:{port}"
    trust = f"ssl.ca.location ({ca})" if ca else "the system's CA store (ssl.ca.location unset)"
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return (f"{where} presented a certificate that verifies against {trust}, but the "
                    "client's TLS handshake failed; check its other ssl.* settings")
    except ssl.SSLCertVerificationError as exc:
        reason = exc.verify_message or str(exc)
    except (OSError, ssl.SSLError) as exc:
        return f"the TLS handshake with {where} failed ({exc}); check the ssl.* settings"
    if "expired" in reason:
        return (f"{where} presented a certificate that has expired ({reason}); renew the "
                "broker's certificate (clients must not skip verification)")
    if "not yet valid" in reason:
        return (f"{where} presented a certificate that is not yet valid ({reason}); check the "
                "broker's certificate dates and the clocks")
    if "issuer" in reason or "self-signed" in reason or "self signed" in reason:
        return (f"{where} presented a certificate that is not signed by a CA in {trust} "
                f"({reason}); point ssl.ca.location at the CA that signed the broker's "
                "certificate")
    if "Hostname mismatch" in reason or "IP address mismatch" in reason:
        return (f"{where} presented a certificate for another name ({reason}); use the name "
                "the certificate was issued for in bootstrap, or reissue it")
    return f"{where} presented a certificate that failed verification ({reason})"


def explain_connect_failure(conf: Mapping[str, Any], errors: ClientErrors,
                            fallback: str) -> str:
    """One sentence for a client that could not get metadata: the refused login, the
    certificate and why, or ``fallback`` (e.g. the client's last connection failure)."""
    auth = errors.first(KafkaError._AUTHENTICATION)
    if auth is not None and mechanism_of(conf) == "OAUTHBEARER":
        return oauth_failure(conf, auth.str())
    if auth is not None:
        mechanism = conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "SASL"
        return (f"authentication failed: the broker refused the {mechanism} login of "
                f"{principal_of(conf)} (wrong user name or password); check kafka: "
                "sasl.username and the secret sasl.password refers to")
    tls = errors.first(KafkaError._SSL)
    if tls is not None:
        if "certificate verify failed" in tls.str():
            return diagnose_tls(conf)
        return f"the TLS handshake failed ({tls.str()}); check the ssl.* settings"
    return fallback


def oauth_failure(conf: Mapping[str, Any], told: str) -> str:
    """A failed OAUTHBEARER login: the token endpoint refused the client (or could not be
    reached), or the broker refused its token."""
    who = principal_of(conf)
    endpoint = conf.get("sasl.oauthbearer.token.endpoint.url")
    if "failed to acquire sasl oauthbearer token" in told.lower():  # librdkafka's words
        return (f"the token endpoint {endpoint} gave {who} no token ({told}); check "
                "sasl.oauthbearer.token.endpoint.url, sasl.oauthbearer.client.id and the secret "
                "sasl.oauthbearer.client.secret refers to")
    return (f"authentication failed: the broker refused the OAUTHBEARER token of {who} "
            f"({told}); check that the broker trusts the issuer of {endpoint} (its JWKS, "
            "expected issuer and audience) and sasl.oauthbearer.scope")


def denial(err: KafkaError | None, topic: str, conf: Mapping[str, Any],
           needed: str) -> str | None:
    """A sentence for a refused right on ``topic`` (None unless ``err`` is that refusal).

    Only the topic's own refusal counts: an assigned reader with a ``group.id`` but no right on
    that group is told so by FindCoordinator, and reads on regardless."""
    if err is None or err.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return None
    return (f"the broker refused {principal_of(conf)} access to topic {topic} ({err.str()}); "
            f'grant it {needed} on {topic} (docs/security.md, "Access control"; `cutover doctor '
            "--config FILE` checks every right)")


def topic_denial(admin: AdminClient, conf: Mapping[str, Any], topic: str,
                 needed: str) -> str | None:
    """Why ``topic`` is missing from this principal's metadata, if it is a refusal.

    Apache Kafka leaves topics a principal may not describe out of a full listing, so a
    missing topic may exist. Describing it by name tells (without auto-creating it, on either
    test broker): ``TOPIC_AUTHORIZATION_FAILED`` is a refusal."""
    try:
        admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=10)
    except KafkaException as exc:
        return denial(exc.args[0], topic, conf, needed)
    return None


def transactional_id_refused(err: KafkaError) -> bool:
    """Whether ``init_transactions`` failed because the principal may not use the
    transactional id (a fatal error of the producer)."""
    return bool(err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
