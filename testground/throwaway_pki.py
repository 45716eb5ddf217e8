"""A throwaway certificate authority for the secured test broker, made with ``cryptography``.

The security suite needs TLS that is real (a CA, a broker certificate that clients verify,
mutual TLS between broker and controller) and certificates that are wrong in named ways
(expired; signed by a CA the client does not trust). Making them in the test, for loopback only,
keeps private keys out of the repository and certificates from expiring under the suite.

Everything is PEM: Kafka reads ``ssl.keystore.type=PEM`` (an unencrypted PKCS#8 key followed by
its certificate chain) and ``ssl.truststore.type=PEM``; librdkafka reads ``ssl.ca.location``,
``ssl.certificate.location`` and ``ssl.key.location``. Keys are EC P-256: fast to make, and every
client here speaks it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)


@dataclass(frozen=True)
class CertFiles:
    """One identity's PEM files: ``keystore`` is key + chain in one file (Kafka's PEM keystore),
    ``cert``/``key`` the same two parts apart (librdkafka)."""

    cert: Path
    key: Path
    keystore: Path


@dataclass(frozen=True)
class Validity:
    not_before: datetime
    not_after: datetime

    @classmethod
    def days(cls, n: int) -> Validity:
        now = datetime.now(UTC)
        return cls(now - timedelta(hours=1), now + timedelta(days=n))

    @classmethod
    def expired(cls) -> Validity:
        """Valid for a day, ten days ago."""
        now = datetime.now(UTC)
        return cls(now - timedelta(days=11), now - timedelta(days=10))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class ThrowawayCA:
    """A self-signed CA in ``folder``; :meth:`issue` writes certificates it signs."""

    def __init__(self, folder: Path, name: str = "cutover-test-ca") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        validity = Validity.days(30)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(validity.not_before).not_valid_after(validity.not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = folder / f"{name}.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, validity: Validity | None = None) -> CertFiles:
        """A certificate for ``CN=common_name``, for loopback, usable as server and client."""
        validity = validity or Validity.days(30)
        key = ec.generate_private_key(ec.SECP256R1())
        san = x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in LOOPBACK_NAMES]
            + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOOPBACK_IPS])
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(validity.not_before).not_valid_after(validity.not_after)
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        files = CertFiles(cert=self.folder / f"{common_name}.crt",
                          key=self.folder / f"{common_name}.key",
                          keystore=self.folder / f"{common_name}.keystore.pem")
        files.cert.write_bytes(cert_pem)
        files.key.write_bytes(_pem_key(key))
        files.keystore.write_bytes(_pem_key(key) + cert_pem)
        for path in (files.key, files.keystore):
            path.chmod(0o600)
        return files
