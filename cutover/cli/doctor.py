"""``cutover doctor``: does the broker grant this principal what its role needs, and no more?

A deploy that lacks one right fails half-way (the router starts, then cannot write its
checkpoints; ``switch`` reads the status, then cannot publish). The doctor connects with the
settings' own ``kafka:`` credentials and checks, for every topic and group the route uses,
each right of the access table (docs/security.md, "Access control"; :mod:`cutover.access`) for
the chosen role, and reports rights held beyond it.

How it asks: ``DescribeTopics`` and ``DescribeGroups`` with *authorized operations*
(KIP-430): the broker's authorizer answers, for this principal, which operations it would allow
on each resource. Chosen over the alternatives because

* listing ACLs (``DescribeAcls``) needs ``Describe`` on the cluster, a right no least-privilege
  principal has, and would show rules rather than what the authorizer decides;
* probing by doing (producing to the control topic, joining the router's group) has effects:
  a record on the control topic, a rebalance of the running routers.

A SASL/OAUTHBEARER (OIDC) identity's principal is the ``sub`` of its token, so the doctor asks
the token endpoint for one first, as the client would, and names the principal the ACLs must
grant; a refused client id or secret is told before any broker is asked. Logins cutover's
clients cannot make (Kerberos, AWS IAM) are refused with the alternatives when the settings
are read (:mod:`cutover.settings`).

Asking needs only what the principal holds already: a topic or group on which it has no right
at all is refused (``TOPIC_AUTHORIZATION_FAILED``), which the doctor reports as "no right"; a
missing topic is told apart when the principal may describe it.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient
from pydantic import BaseModel, ConfigDict

from cutover.access import (
    IMPLIED,
    Operation,
    Resource,
    ResourceKind,
    Right,
    Role,
    operation_of,
    required_rights,
    route_resources,
)
from cutover.certificate_principal import certificate_principal
from cutover.cli.errors import CliError
from cutover.cli.settings_file import route_in, settings_file
from cutover.kafka_errors import (
    ClientErrors,
    explain_connect_failure,
    list_topics,
    mechanism_of,
    principal_of,
    transactional_id_refused,
)
from cutover.secret_refs import resolve_secrets
from cutover.settings import RouterSettings

_RETRIED = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE)


class Seen(BaseModel):
    """What the broker said about one resource for this principal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: Resource
    exists: bool | None          # None: not visible to this principal
    operations: frozenset[Operation]


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    right: Right
    granted: bool


class Excess(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: Resource
    operations: tuple[Operation, ...]


class DoctorReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    principal: str
    role: Role
    bootstrap: str
    checks: tuple[Check, ...]
    excess: tuple[Excess, ...]
    missing_topics: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(c.granted for c in self.checks) and not self.missing_topics


def _client_conf(settings: RouterSettings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.bootstrap, "log_level": 0,
            **resolve_secrets(settings.kafka)}


def token_subject(conf: Mapping[str, Any], timeout: float = 10.0) -> str:
    """The ``sub`` of the token an OIDC client-credentials login gets: the broker's principal
    is ``User:<sub>``, which the ACLs must name. Asked of the token endpoint as librdkafka asks
    it; a refusal is a sentence naming the setting to check."""
    endpoint = str(conf.get("sasl.oauthbearer.token.endpoint.url") or "")
    client = str(conf.get("sasl.oauthbearer.client.id") or "")
    who = principal_of(conf)
    if not endpoint or not client:
        raise CliError(f"{who}: the OIDC login needs sasl.oauthbearer.token.endpoint.url and "
                       "sasl.oauthbearer.client.id in kafka:", 2)
    form = {"grant_type": "client_credentials"}
    if conf.get("sasl.oauthbearer.scope"):
        form["scope"] = str(conf["sasl.oauthbearer.scope"])
    basic = base64.b64encode(
        f"{client}:{conf.get('sasl.oauthbearer.client.secret', '')}".encode()).decode()
    request = urllib.request.Request(
        endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
        headers={"Authorization": f"Basic {basic}",
                 "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            token = str(json.loads(answer.read())["access_token"])
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        return str(claims["sub"])
    except urllib.error.HTTPError as exc:
        raise CliError(f"cannot log in as {who}: the token endpoint {endpoint} refused the "
                       f"client credentials (HTTP {exc.code}); check sasl.oauthbearer.client.id "
                       "and the secret sasl.oauthbearer.client.secret refers to", 3) from None
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise CliError(f"cannot log in as {who}: no token from {endpoint} ({exc}); check "
                       "sasl.oauthbearer.token.endpoint.url", 3) from None


def connect(conf: Mapping[str, Any]) -> AdminClient:
    """An admin client that has answered a metadata request; a sentence when refused."""
    errors = ClientErrors()
    admin = AdminClient({**conf, "error_cb": errors})
    try:
        list_topics(admin, errors, timeout=10)
    except KafkaException as exc:
        admin.poll(0)
        reason = explain_connect_failure(conf, errors, exc.args[0].str())
        raise CliError(f"cannot connect to Kafka at {conf['bootstrap.servers']} as "
                       f"{principal_of(conf)}: {reason}", 3) from None
    return admin


def _operations(ops: list[AclOperation] | None) -> frozenset[Operation]:
    found = (operation_of(op) for op in (ops or ()))
    return frozenset(op for op in found if op is not None)


def see_topics(admin: AdminClient, names: list[str]) -> dict[str, Seen]:
    futures = admin.describe_topics(TopicCollection(names), include_authorized_operations=True)
    out: dict[str, Seen] = {}
    for name, fut in futures.items():
        resource = Resource(kind=ResourceKind.TOPIC, name=name)
        try:
            desc = fut.result(timeout=15)
        except KafkaException as exc:
            code = exc.args[0].code()
            exists = False if code == KafkaError.UNKNOWN_TOPIC_OR_PART else None
            out[name] = Seen(resource=resource, exists=exists, operations=frozenset())
            continue
        out[name] = Seen(resource=resource, exists=True,
                         operations=_operations(desc.authorized_operations))
    return out


def see_group(admin: AdminClient, group: str, attempts: int = 10) -> Seen:
    """A group's authorized operations; the coordinator may still be loading at first."""
    resource = Resource(kind=ResourceKind.GROUP, name=group)
    for _ in range(attempts):
        fut = admin.describe_consumer_groups([group], include_authorized_operations=True)[group]
        try:
            desc = fut.result(timeout=15)
        except KafkaException as exc:
            if exc.args[0].code() in _RETRIED:
                time.sleep(0.5)
                continue
            return Seen(resource=resource, exists=None, operations=frozenset())
        return Seen(resource=resource, exists=True,
                    operations=_operations(desc.authorized_operations))
    raise CliError(f"the group coordinator for {group} did not answer; retry in a moment", 3)


def see_transactional_ids(conf: Mapping[str, Any], resource: Resource) -> Seen:
    """Whether the principal may use the router's transactional ids: no broker API reports it
    (KIP-430 covers topics, groups and the cluster), so the doctor starts a transactional
    producer under the prefix with an id no worker uses (``<prefix>cutover-doctor``). That
    registers the id with a coordinator and writes nothing."""
    quiet = ClientErrors()   # the refusal is the answer, not a log line
    producer = Producer({**conf, "transactional.id": f"{resource.name}cutover-doctor",
                         "error_cb": quiet, "logger": quiet})
    try:
        producer.init_transactions(15)
    except KafkaException as exc:
        if transactional_id_refused(exc.args[0]):
            return Seen(resource=resource, exists=None, operations=frozenset())
        raise CliError(f"could not check the transactional ids {resource.name}*: "
                       f"{exc.args[0].str()}; retry in a moment", 3) from None
    return Seen(resource=resource, exists=True,
                operations=frozenset({Operation.WRITE, Operation.DESCRIBE}))


def examine(settings: RouterSettings, role: Role, route: str | None = None,
            job_topic: str | None = None) -> DoctorReport:
    """Connect as the settings' principal and compare what the broker allows with the table."""
    conf = _client_conf(settings)
    subject = token_subject(conf) if mechanism_of(conf) == "OAUTHBEARER" else None
    admin = connect(conf)
    needed = required_rights(settings, role, route, job_topic)
    resources = list(dict.fromkeys([*route_resources(settings, route),
                                    *(r.resource for r in needed)]))
    topics = [r.name for r in resources if r.kind is ResourceKind.TOPIC]
    seen: dict[Resource, Seen] = {s.resource: s for s in see_topics(admin, topics).values()}
    for r in resources:
        if r.kind is ResourceKind.GROUP:
            seen[r] = see_group(admin, r.name)
        elif r.kind is ResourceKind.TRANSACTIONAL_ID:
            seen[r] = see_transactional_ids(conf, r)
    checks = tuple(Check(right=x, granted=x.operation in seen[x.resource].operations)
                   for x in needed)
    excess = []
    for r in resources:
        wanted = {x.operation for x in needed if x.resource == r}
        allowed = wanted | {i for op in wanted for i in IMPLIED.get(op, ())}
        extra = sorted(seen[r].operations - allowed)
        if extra:
            excess.append(Excess(resource=r, operations=tuple(extra)))
    missing = tuple(sorted({x.resource.name for x in needed
                            if x.resource.kind is ResourceKind.TOPIC
                            and seen[x.resource].exists is False}))
    user = subject or conf.get("sasl.username")
    principal = f"User:{user}" if user else certificate_principal(conf) or principal_of(conf)
    return DoctorReport(principal=principal, role=role,
                        bootstrap=settings.bootstrap, checks=checks, excess=tuple(excess),
                        missing_topics=missing)


def render(report: DoctorReport) -> str:
    lines = [f"{report.principal} at {report.bootstrap}, checked for the {report.role.value} "
             "role:"]
    for c in report.checks:
        r = c.right
        mark = "ok     " if c.granted else "MISSING"
        lines.append(f"  {mark} {r.operation.value:<9} {r.resource!s:<40} {r.why}")
        if not c.granted:
            lines.append(f"          grant: {r.kafka_acls(report.principal, report.bootstrap)}")
    for name in report.missing_topics:
        lines.append(f"  topic {name} does not exist: create it with `cutover init` "
                     '(docs/operations.md, "Running it in production")')
    for e in report.excess:
        ops = ", ".join(op.value for op in e.operations)
        lines.append(f"  more than the {report.role.value} role needs: {ops} on {e.resource}; "
                     "remove the ACL unless this identity has another role")
    missing = sum(not c.granted for c in report.checks)
    lines.append(f"{len(report.checks) - missing} of {len(report.checks)} rights granted"
                 + (f", {missing} missing" if missing else "")
                 + (f", {len(report.excess)} resources with more than needed"
                    if report.excess else ""))
    return "\n".join(lines)


def _cmd_doctor(args: argparse.Namespace) -> int:
    settings = settings_file(args.config)
    if args.route is not None:
        route_in(settings, args.route, args.config)
    report = examine(settings, Role(args.role), args.route, args.topic)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        print(render(report))
    return 0 if report.ok else 1


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check that the broker grants this principal the rights "
                                      "its role needs (and no more)")
    p.add_argument("--config", required=True,
                   help="settings file: its bootstrap and kafka: credentials are the principal "
                        "checked")
    p.add_argument("--role", choices=[r.value for r in Role], default=Role.ROUTER.value,
                   help="the role this principal plays (default router)")
    p.add_argument("--route", help="check one route (default: every route in the file)")
    p.add_argument("--topic", help="for --role job: the job's raw topic (default: the route's "
                                   "inputs)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(func=_cmd_doctor)
