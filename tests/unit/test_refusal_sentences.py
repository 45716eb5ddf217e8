"""The sentences for refused clients, against a real TLS handshake on loopback (no broker)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from cutover.kafka_errors import ClientErrors, diagnose_tls, explain_connect_failure
from testground.throwaway_pki import CertFiles, ThrowawayCA, Validity


@contextlib.contextmanager
def tls_server(cert: CertFiles) -> Iterator[str]:
    """A loopback TLS server presenting ``cert`` to every connection; yields host:port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return ThrowawayCA(tmp_path_factory.mktemp("pki"))


def test_an_expired_certificate_is_named(ca: ThrowawayCA) -> None:
    with tls_server(ca.issue("old-broker", Validity.expired())) as address:
        said = diagnose_tls({"bootstrap.servers": address, "ssl.ca.location": str(ca.ca_file)})
    assert said == (f"the broker at {address} presented a certificate that has expired "
                    "(certificate has expired); renew the broker's certificate (clients must "
                    "not skip verification)")


def test_a_certificate_from_an_unknown_ca_is_named(ca: ThrowawayCA, tmp_path: Path) -> None:
    other = ThrowawayCA(tmp_path, "other-ca")
    with tls_server(ca.issue("broker")) as address:
        said = diagnose_tls({"bootstrap.servers": f"SASL_SSL://{address}",
                             "ssl.ca.location": str(other.ca_file)})
        good = diagnose_tls({"bootstrap.servers": address, "ssl.ca.location": str(ca.ca_file)})
    assert said.startswith(f"the broker at {address} presented a certificate that is not "
                           f"signed by a CA in ssl.ca.location ({other.ca_file})")
    assert "point ssl.ca.location at the CA that signed the broker's certificate" in said
    assert good.startswith(f"the broker at {address} presented a certificate that verifies")


def test_a_refused_login_names_the_user_and_where_to_look() -> None:
    errors = ClientErrors()
    errors(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid"))
    conf = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "router",
            "sasl.password": "hunter2-secret"}
    said = explain_connect_failure(conf, errors, "transport failure")
    assert said == ("authentication failed: the broker refused the SCRAM-SHA-512 login of user "
                    "'router' (wrong user name or password); check kafka: sasl.username and "
                    "the secret sasl.password refers to")
    assert errors.refused() and "hunter2" not in said
    assert explain_connect_failure(conf, ClientErrors(), "transport failure") == \
        "transport failure"
