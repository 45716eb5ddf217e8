"""A route deployed on the secured broker with one identity per role, as the README grants.

Each :class:`SecuredRoute` has its own topics and its own SCRAM users (``router-<name>``,
``operator-<name>``, ``job-<name>``), so a test's ACLs are exactly the table's rows for its
route. Passwords are random and live in files (mode 0600) or environment variables; settings
files refer to them (``${file:...}``, ``${env:...}``), as production settings must.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from cutover.access import Role, required_rights
from cutover.control.routes import RouteView, Target, read_views
from cutover.settings import RouterSettings, parse_settings
from router.base.kafka_io import read_to_end
from testground.brokers import create_topics
from testground.secure_kafka import SCRAM_MECHANISM, SecuredKafka
from tests.children import VENV_BIN
from tests.integration.harness import BASE_T, STEP, Job, check_output, events


@dataclass
class Identity:
    """A SCRAM user; its password in ``secret_file`` and, for env references, ``env_name``."""

    user: str
    secret_file: Path
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    env_name: str | None = None

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def write_secret(self, password: str | None = None) -> None:
        self.secret_file.write_text((password or self.password) + "\n")
        self.secret_file.chmod(0o600)

    def env(self) -> dict[str, str]:
        return {self.env_name: self.password} if self.env_name else {}

    def kafka_settings(self, ca_file: Path) -> dict[str, str]:
        """The settings' ``kafka:`` section: the secret by reference, never in clear."""
        ref = f"${{env:{self.env_name}}}" if self.env_name else f"${{file:{self.secret_file}}}"
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": self.user, "sasl.password": ref,
                "ssl.ca.location": str(ca_file)}


@dataclass
class PlainUser:
    """A SASL/PLAIN user of the broker's PLAINTLS listener (set in its JAAS entry at start)."""

    user: str
    password: str


@dataclass
class LoginIdentity(Identity):
    """An identity that logs in on another listener than SCRAM's: OAUTHBEARER with OIDC client
    credentials (``user`` is the client id, the password its secret) or PLAIN over TLS."""

    mechanism: str = "OAUTHBEARER"
    bootstrap: str = ""
    token_url: str = ""

    def kafka_settings(self, ca_file: Path) -> dict[str, str]:
        ref = f"${{env:{self.env_name}}}" if self.env_name else f"${{file:{self.secret_file}}}"
        if self.mechanism == "PLAIN":
            return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                    "sasl.username": self.user, "sasl.password": ref,
                    "ssl.ca.location": str(ca_file)}
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": self.token_url,
                "sasl.oauthbearer.client.id": self.user,
                "sasl.oauthbearer.client.secret": ref, "ssl.ca.location": str(ca_file)}

    def client_conf(self, ca_file: Path) -> dict[str, Any]:
        """The settings with the secret in clear, for a test's own client."""
        conf: dict[str, Any] = {**self.kafka_settings(ca_file), "bootstrap.servers":
                                self.bootstrap}
        key = "sasl.password" if self.mechanism == "PLAIN" else "sasl.oauthbearer.client.secret"
        conf[key] = self.password
        return conf


@dataclass
class CertIdentity(LoginIdentity):
    """A client that logs in with its certificate (mutual TLS) on the broker's MTLS listener:
    ``user`` is the certificate's common name, the principal ``User:CN=<user>``. Its secret is
    the private key, in a file (mode 0600); ``password`` holds the key's PEM body so that
    :func:`assert_no_secret` checks it never appears anywhere."""

    mechanism: str = "SSL"
    cert: Path = Path()
    key: Path = Path()
    keystore: Path = Path()

    @property
    def principal(self) -> str:
        return f"User:CN={self.user}"

    def write_secret(self, password: str | None = None) -> None:
        """The key is the certificate's, written by the CA; nothing to write."""

    def kafka_settings(self, ca_file: Path) -> dict[str, str]:
        return {"security.protocol": "SSL", "ssl.ca.location": str(ca_file),
                "ssl.certificate.location": str(self.cert), "ssl.key.location": str(self.key)}

    def client_conf(self, ca_file: Path) -> dict[str, Any]:
        return {**self.kafka_settings(ca_file), "bootstrap.servers": self.bootstrap}

    def spark_options(self, ca_file: Path) -> dict[str, str]:
        """The same login as a job writes it for Spark's connector (the Java client's names)."""
        return {"kafka.bootstrap.servers": self.bootstrap, "kafka.security.protocol": "SSL",
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": str(ca_file),
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.location": str(self.keystore)}


@dataclass
class CliRun:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


class SecuredRoute:
    """One route's topics on the secured broker, its identities and their settings files."""

    def __init__(self, kafka: SecuredKafka, tmp: Path, partitions: int = 2) -> None:
        self.kafka = kafka
        self.tmp = tmp
        self.partitions = partitions
        self.name = n = f"s{uuid.uuid4().hex[:8]}"
        self.route = n
        self.inputs = [f"{n}.raw"]
        self.output, self.dlq = f"{n}.out", f"{n}.dlq"
        self.control, self.status = f"{n}.control", f"{n}.status"
        self.group = f"g-{n}"
        self.checkpoints = f"{self.group}.checkpoints"
        self.super_conf = kafka.cluster.admin_conf(kafka.cluster.nodes[0])
        topics = {t: partitions for t in (*self.inputs, self.output, self.dlq)}
        topics |= {self.control: 1, self.status: 1, self.checkpoints: 1}
        create_topics(self.super_conf["bootstrap.servers"], topics,
                      compacted=[self.control, self.checkpoints], extra=self.super_conf)
        self.router = self.identity("router")
        self.operator = self.identity("operator", env=True)
        self.job = self.identity("job")
        for who, role in ((self.router, Role.ROUTER), (self.operator, Role.OPERATOR),
                          (self.job, Role.JOB)):
            self.grant(who, role)

    # -- identities ---------------------------------------------------------------------------

    def identity(self, role: str, env: bool = False, password: str | None = None) -> Identity:
        """A new SCRAM user ``<role>-<route>`` with no ACL yet."""
        user = f"{role}-{self.name}"
        who = Identity(user, self.tmp / f"{user}.secret",
                       env_name=f"CUTOVER_TEST_{role.upper()}_PASSWORD" if env else None)
        if password is not None:
            who.password = password
        who.write_secret()
        self.kafka.set_password(user, who.password)
        self.wait_login(who)
        return who

    def oauth_identity(self, issuer: Any, role: str, env: bool = False) -> LoginIdentity:
        """A new OIDC client ``<role>-<route>`` of ``issuer`` (an
        :class:`~tests.security.oidc_issuer.OidcIssuer`), principal ``User:<client id>``,
        with its role's rights."""
        user = f"oidc-{role}-{self.name}"
        who = LoginIdentity(user, self.tmp / f"{user}.secret", bootstrap=self.kafka.oauth_bootstrap,
                            token_url=issuer.token_url,
                            env_name=f"CUTOVER_TEST_OIDC_{role.upper()}_SECRET" if env else None)
        who.write_secret()
        issuer.register(user, who.password)
        return who

    def plain_identity(self, plain: PlainUser) -> LoginIdentity:
        """The broker's PLAIN user, logging in over TLS."""
        who = LoginIdentity(plain.user, self.tmp / f"{plain.user}.secret", password=plain.password,
                            mechanism="PLAIN", bootstrap=self.kafka.plain_bootstrap)
        who.write_secret()
        return who

    def cert_identity(self, role: str) -> CertIdentity:
        """A new client certificate ``CN=cert-<role>-<route>`` of the cluster's CA, with no ACL
        yet."""
        user = f"cert-{role}-{self.name}"
        files = self.kafka.issue_client_certificate(user)
        body = "".join(files.key.read_text().splitlines()[1:-1])
        return CertIdentity(user, files.key, password=body, bootstrap=self.kafka.mtls_bootstrap,
                            cert=files.cert, key=files.key, keystore=files.keystore)

    def wait_login(self, who: Identity, timeout: float = 20.0) -> None:
        """Until the broker accepts the user's login (credentials propagate as metadata)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                AdminClient({**self.client_conf(who), "log_level": 0}).list_topics(timeout=3)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def grant(self, who: Identity, role: Role) -> None:
        self.kafka.grant(r.binding(who.principal)
                         for r in required_rights(self.settings(who), role))

    def client_conf(self, who: Identity, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a test's own client logged in as ``who``."""
        if isinstance(who, LoginIdentity):
            return {**who.client_conf(self.kafka.ca_file), **extra}
        return {**self.kafka.sasl_conf(who.user, who.password), **extra}

    # -- settings -----------------------------------------------------------------------------

    def settings_dict(self, who: Identity, **over: Any) -> dict[str, Any]:
        d: dict[str, Any] = {
            "bootstrap": who.bootstrap if isinstance(who, LoginIdentity) else self.kafka.bootstrap,
            "control_topic": self.control,
            "status_topic": self.status, "group_id": self.group,
            "checkpoint_topic": self.checkpoints,
            "state_dir": str(self.tmp / f"state-{self.name}"), "http_port": None,
            "status_interval_s": 0.5,
            "kafka": {**who.kafka_settings(self.kafka.ca_file),
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "routes": [{"name": self.route, "inputs": self.inputs, "output": self.output,
                        "dead_letter": self.dlq}],
        }
        d.update(over)
        return d

    def settings(self, who: Identity) -> RouterSettings:
        return parse_settings(self.settings_dict(who))

    def write_settings(self, who: Identity, name: str | None = None, **over: Any) -> Path:
        path = self.tmp / f"{self.name}-{name or who.user}.yaml"
        path.write_text(yaml.safe_dump(self.settings_dict(who, **over)))
        return path

    # -- operator's commands, run as the operator runs them --------------------------------

    def cli(self, who: Identity, *args: str, config: Path | None = None,
            env: dict[str, str] | None = None, timeout: float = 120) -> CliRun:
        config = config or self.write_settings(who)
        child_env = {k: v for k, v in os.environ.items()
                     if k not in ("CUTOVER_PLAN_KEY", "CUTOVER_PLAN_KEY_FILE")}
        child_env.update({**who.env(), **(env or {})})
        done = subprocess.run([str(VENV_BIN / "cutover"), *args, "--config", str(config)],
                              capture_output=True, text=True, env=child_env, timeout=timeout)
        return CliRun(done.returncode, done.stdout, done.stderr)

    # -- reading as the super user (the test's own eyes) ----------------------------------

    def topic_for(self, version: str) -> str:
        return self.inputs[0]

    def read(self, topic: str) -> list[Any]:
        return list(read_to_end({**self.super_conf, "log_level": 0}, topic))

    def view(self) -> RouteView:
        t = Target({**self.super_conf, "log_level": 0}, self.control, self.status,
                   {self.route: self.partitions})
        return read_views(t, self.route)[self.route]

    def wait_for(self, what: str, pred: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_horizon(self, at_least: int, versions: tuple[str, ...] = ()) -> None:
        def ok() -> bool:
            v = self.view()
            hs = [ps.horizon or 0 for ps, *_ in v.partitions.values()]
            marks = all(ver in ps.watermarks for ps, *_ in v.partitions.values()
                        for ver in versions)
            return len(hs) == self.partitions and min(hs) >= at_least and marks

        self.wait_for(f"every partition's horizon >= {at_least}", ok)

    def wait_output(self, n: int, timeout: float = 90.0) -> None:
        self.wait_for(f"{n} output records", lambda: len(self.read(self.output)) >= n, timeout)
        time.sleep(1.0)  # a duplicate would show up now


class SecureJob(Job):
    """An emulated tagged job (records and heartbeats as the tagger writes them), writing as
    the route's job identity."""

    def __init__(self, route: SecuredRoute, version: str, who: Identity | None = None,
                 producer_conf: dict[str, Any] | None = None) -> None:
        self.env = route  # type: ignore[assignment]  # the harness's Job reads what it needs
        self.version = version
        self.topic = route.topic_for(version)
        self.lateness = 0
        self.max_t = None
        self.batch = 0
        self.producer = Producer(producer_conf or route.client_conf(
            who or route.job, **{"linger.ms": 5, "queue.buffering.max.messages": 1_000_000}))


def assert_no_secret(texts: dict[str, str], *identities: Identity) -> None:
    """No password of ``identities`` appears in any of ``texts`` (name -> text)."""
    for who in identities:
        for name, text in texts.items():
            assert who.password not in text, f"{who.user}'s password appears in {name}"


def switch_blue_to_green(route: SecuredRoute, operator: Identity, blue: SecureJob,
                         green: SecureJob, runs: list[CliRun]) -> dict[str, Any]:
    """A whole switch through a secured route, each step by the operator's login: blue first
    primary, both versions writing, a switch to green ahead of the horizon, the wait for
    CLEAR_TO_TEARDOWN; every event forwarded once from the primary of its event time. Each
    command's run is added to ``runs``; returns the route's last status (``status --json``)."""
    runs.append(route.cli(operator, "switch", "--route", route.route, "--to", "blue",
                          "--at", "auto"))
    assert runs[-1].code == 0, runs[-1].text
    for lo in range(0, 300, 100):
        blue.emit(events(lo, lo + 100))
        green.emit(events(lo, lo + 100))
    route.wait_horizon(BASE_T + 298 * STEP, versions=("blue", "green"))
    runs.append(route.cli(operator, "switch", "--route", route.route, "--to", "green",
                          "--at", "auto", "--margin", "1s"))
    assert runs[-1].code == 0, runs[-1].text
    plan = route.view().plan
    assert plan is not None and plan.transition is not None
    boundary = plan.transition[2]
    for lo in range(300, 600, 100):
        green.emit(events(lo, lo + 100))
        blue.emit(events(lo, lo + 100))
    runs.append(route.cli(operator, "wait", "--route", route.route, "--for",
                          "clear-to-teardown", "--timeout", "60s"))
    assert runs[-1].code == 0, runs[-1].text
    evs = events(0, 600)
    route.wait_output(len(evs))
    check_output(route, evs, lambda p, t: "green" if t >= boundary else "blue")  # type: ignore[arg-type]
    runs.append(route.cli(operator, "status", "--route", route.route, "--json"))
    status: dict[str, Any] = json.loads(runs[-1].out)[route.route]
    assert status["counters"]["forwarded"] == len(evs)
    return status
