"""Apache Kafka with authentication and authorisation switched on, for the security suite.

The embedded broker has neither, so nothing proved that the router, the tagger and the
operator's commands work with least-privilege credentials, nor that the broker refuses the
rest. This module secures a :class:`~testground.kafka_broker.KafkaCluster` the way a production
cluster is secured:

* clients connect to a ``SASL_SSL`` listener (``CLIENT``) and log in with SCRAM-SHA-512;
* brokers and controllers talk over listeners with mutual TLS (``INTERNAL``, ``CONTROLLER``);
  the certificate's principal ``User:CN=cutover-broker`` is the only super user;
* ``StandardAuthorizer`` (KRaft's ACL store) with ``allow.everyone.if.no.acl.found=false``:
  whatever no ACL grants is refused;
* an optional second client listener (``EXPIRED``) presents a certificate that expired ten
  days ago, so a test can show what a client is told about it without a second broker;
* with an OIDC provider's JWKS address, a ``SASL_SSL`` listener (``OAUTH``) takes
  SASL/OAUTHBEARER logins and validates their JWTs against it (issuer and audience checked),
  as managed Kafka with OAuth does; the principal is ``User:<the token's sub>``;
* with PLAIN users, a ``SASL_SSL`` listener (``PLAINTLS``) takes SASL/PLAIN logins, the shape
  Confluent Cloud's API keys use;
* with ``mtls``, an ``SSL`` listener (``MTLS``) with ``ssl.client.auth=required`` takes clients
  that log in with a certificate of the cluster's CA; the principal is ``User:<the
  certificate's subject>`` (``User:CN=cutover-router``), as Kafka names it by default.

Users and ACLs are made through the admin API as the super user (over ``INTERNAL``), so no
password ever appears on a command line, and a test can change a password while a client
retries. Certificates come from :mod:`testground.throwaway_pki`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from cutover.demo_broker import free_port
from cutover.topic_admin import BrokerError
from testground.kafka_broker import KafkaCluster, KafkaNode
from testground.throwaway_pki import CertFiles, ThrowawayCA, Validity

BROKER_CN = "cutover-broker"
SUPER_USER = f"User:CN={BROKER_CN}"
SCRAM_MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
_OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
_OAUTH_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer."
                    "OAuthBearerValidatorCallbackHandler")
_BROKER_JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"
# Apache Kafka 4 reads JWKS only from addresses this JVM system property allows.
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


@dataclass(frozen=True)
class OidcTrust:
    """What the brokers check a SASL/OAUTHBEARER login's JWT against."""

    jwks_url: str
    issuer: str
    audience: str


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class SecureListeners:
    """The :class:`~testground.kafka_broker.NodeSecurity` of the secured test cluster."""

    pki: Path
    with_expired_listener: bool = True
    oidc: OidcTrust | None = None
    plain_users: dict[str, str] = field(default_factory=dict)
    mtls: bool = False
    ca: ThrowawayCA = field(init=False)
    broker_cert: CertFiles = field(init=False)
    expired_cert: CertFiles = field(init=False)
    internal_ports: dict[int, int] = field(default_factory=dict)
    expired_ports: dict[int, int] = field(default_factory=dict)
    oauth_ports: dict[int, int] = field(default_factory=dict)
    plain_ports: dict[int, int] = field(default_factory=dict)
    mtls_ports: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ca = ThrowawayCA(self.pki)
        self.broker_cert = self.ca.issue(BROKER_CN)
        self.expired_cert = self.ca.issue(f"{BROKER_CN}-expired", Validity.expired())

    def _ports(self, node: KafkaNode) -> tuple[int, int]:
        internal = self.internal_ports.setdefault(node.node_id, free_port())
        expired = self.expired_ports.setdefault(node.node_id, free_port())
        return internal, expired

    def node_properties(self, node: KafkaNode, voters: str) -> dict[str, Any]:
        internal, expired = self._ports(node)
        listeners = [f"CLIENT://127.0.0.1:{node.port}", f"INTERNAL://127.0.0.1:{internal}"]
        protocols = ["CLIENT:SASL_SSL", "INTERNAL:SSL", "CONTROLLER:SSL"]
        if self.with_expired_listener:
            listeners.append(f"EXPIRED://127.0.0.1:{expired}")
            protocols.append("EXPIRED:SASL_SSL")
        if self.oidc is not None:
            port = self.oauth_ports.setdefault(node.node_id, free_port())
            listeners.append(f"OAUTH://127.0.0.1:{port}")
            protocols.append("OAUTH:SASL_SSL")
        if self.plain_users:
            port = self.plain_ports.setdefault(node.node_id, free_port())
            listeners.append(f"PLAINTLS://127.0.0.1:{port}")
            protocols.append("PLAINTLS:SASL_SSL")
        if self.mtls:
            port = self.mtls_ports.setdefault(node.node_id, free_port())
            listeners.append(f"MTLS://127.0.0.1:{port}")
            protocols.append("MTLS:SSL")
        props: dict[str, Any] = {
            "listeners": ",".join([*listeners,
                                   f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(protocols),
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.broker_cert.keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ca.ca_file,
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.controller.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.client.scram-sha-512.sasl.jaas.config": _SCRAM_JAAS,
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": SUPER_USER,
        }
        if self.with_expired_listener:
            props["listener.name.expired.scram-sha-512.sasl.jaas.config"] = _SCRAM_JAAS
            props["listener.name.expired.ssl.keystore.type"] = "PEM"
            props["listener.name.expired.ssl.keystore.location"] = self.expired_cert.keystore
        if self.oidc is not None:
            props.update({
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.oauth.oauthbearer.sasl.jaas.config": _OAUTH_JAAS,
                "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class":
                    _OAUTH_VALIDATOR,
                "sasl.oauthbearer.jwks.endpoint.url": self.oidc.jwks_url,
                "sasl.oauthbearer.expected.issuer": self.oidc.issuer,
                "sasl.oauthbearer.expected.audience": self.oidc.audience,
                # Apache Kafka 4.1's default JWT validator on a broker is the client's, which
                # checks no signature (a token signed with any key got in): name the broker's,
                # which checks it against the JWKS. Kafka 3.9 has no such setting and checks.
                "sasl.oauthbearer.jwt.validator.class": _BROKER_JWT_VALIDATOR,
            })
        if self.plain_users:
            users = " ".join(f"user_{u}={_jaas_quote(p)}" for u, p in self.plain_users.items())
            props.update({
                "listener.name.plaintls.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.plaintls.plain.sasl.jaas.config":
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            })
        if self.mtls:
            props["listener.name.mtls.ssl.client.auth"] = "required"
        return props

    def admin_conf(self, node: KafkaNode) -> dict[str, Any]:
        internal, _ = self._ports(node)
        return {"bootstrap.servers": f"127.0.0.1:{internal}", "security.protocol": "SSL",
                "ssl.ca.location": str(self.ca.ca_file),
                "ssl.certificate.location": str(self.broker_cert.cert),
                "ssl.key.location": str(self.broker_cert.key)}


class SecuredKafka:
    """A started secured cluster: SCRAM users, ACLs, and client settings for a user."""

    def __init__(self, cluster: KafkaCluster, listeners: SecureListeners) -> None:
        self.cluster = cluster
        self.listeners = listeners

    @property
    def bootstrap(self) -> str:
        """The SASL_SSL client listeners."""
        return self.cluster.bootstrap

    @property
    def expired_bootstrap(self) -> str:
        """Client listeners whose certificate expired ten days ago."""
        return ",".join(f"127.0.0.1:{self.listeners.expired_ports[n.node_id]}"
                        for n in self.cluster.nodes)

    @property
    def oauth_bootstrap(self) -> str:
        """The SASL_SSL listeners that take OAUTHBEARER logins (JWTs of the OIDC provider)."""
        return ",".join(f"127.0.0.1:{self.listeners.oauth_ports[n.node_id]}"
                        for n in self.cluster.nodes)

    @property
    def plain_bootstrap(self) -> str:
        """The SASL_SSL listeners that take PLAIN logins."""
        return ",".join(f"127.0.0.1:{self.listeners.plain_ports[n.node_id]}"
                        for n in self.cluster.nodes)

    @property
    def mtls_bootstrap(self) -> str:
        """The SSL listeners that take clients by their certificate (mutual TLS)."""
        return ",".join(f"127.0.0.1:{self.listeners.mtls_ports[n.node_id]}"
                        for n in self.cluster.nodes)

    def issue_client_certificate(self, common_name: str) -> CertFiles:
        """A client certificate of the cluster's CA; its principal is ``User:CN=<name>``."""
        return self.listeners.ca.issue(common_name)

    @property
    def ca_file(self) -> Path:
        return self.listeners.ca.ca_file

    def admin(self) -> AdminClient:
        """An admin client as the super user (the broker principal, over mutual TLS)."""
        return AdminClient({**self.cluster.admin_conf(self.cluster.nodes[0]), "log_level": 0})

    def set_password(self, user: str, password: str, iterations: int = 4096) -> None:
        """Create the SCRAM-SHA-512 user, or change its password."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, iterations)
        upsert = UserScramCredentialUpsertion(user, info, password.encode())
        admin = self.admin()  # kept referenced until the futures resolve
        for fut in admin.alter_user_scram_credentials([upsert]).values():
            try:
                fut.result(timeout=30)
            except KafkaException as exc:
                raise BrokerError(f"could not set the SCRAM credential of {user!r}: "
                                  f"{exc.args[0].str()}") from None

    def grant(self, bindings: Iterable[AclBinding]) -> None:
        """Create ALLOW ACLs (see :meth:`cutover.access.Right.binding`)."""
        bindings = list(bindings)
        if not bindings:
            return
        admin = self.admin()
        for binding, fut in admin.create_acls(bindings).items():
            try:
                fut.result(timeout=30)
            except KafkaException as exc:
                raise BrokerError(f"could not create ACL {binding}: "
                                  f"{exc.args[0].str()}") from None

    def acls_of(self, principal: str) -> list[AclBinding]:
        """Every ACL naming ``principal`` (as the super user sees them)."""
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal,
                               None, AclOperation.ANY, AclPermissionType.ANY)
        admin = self.admin()
        return list(admin.describe_acls(flt).result(timeout=30))

    def sasl_conf(self, user: str, password: str, *,
                  bootstrap: str | None = None, ca_file: Path | None = None) -> dict[str, str]:
        """librdkafka settings to log in as ``user`` (tests only: settings files refer to
        secrets by file or environment variable, see :mod:`cutover.secret_refs`)."""
        return {"bootstrap.servers": bootstrap or self.bootstrap,
                "security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user, "sasl.password": password,
                "ssl.ca.location": str(ca_file or self.ca_file)}


@contextlib.contextmanager
def _jvm_allows(urls: list[str]) -> Iterator[None]:
    """Brokers started inside see ``urls`` allowed as OAUTHBEARER endpoints (a JVM system
    property, passed as ``JAVA_TOOL_OPTIONS``, which every JVM reads at start)."""
    if not urls:
        yield
        return
    before = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(
        filter(None, [before, f"-D{OAUTH_ALLOWED_URLS}={','.join(urls)}"]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = before


@contextlib.contextmanager
def secured_kafka(root: Path, size: int = 1, oidc: OidcTrust | None = None,
                  plain_users: dict[str, str] | None = None,
                  mtls: bool = False) -> Iterator[SecuredKafka]:
    """Start a secured cluster under ``root`` (certificates in ``root/pki``); stop it after.
    ``oidc`` adds the OAUTHBEARER listener, ``plain_users`` the PLAIN one, ``mtls`` the one
    that takes client certificates."""
    listeners = SecureListeners(root / "pki", oidc=oidc, plain_users=dict(plain_users or {}),
                                mtls=mtls)
    (root / "kafka").mkdir(parents=True, exist_ok=True)
    cluster = KafkaCluster(size=size, root=root / "kafka", security=listeners)
    with _jvm_allows([oidc.jwks_url] if oidc is not None else []):
        cluster.start()
    try:
        yield SecuredKafka(cluster, listeners)
    finally:
        cluster.stop()
