"""docs/security.md's broker-side example is the configuration the security suite runs Apache
Kafka with, and its ACL lines are the ones ``cutover init`` prints."""

from __future__ import annotations

import re
from pathlib import Path

from cutover.access import Role, required_rights
from cutover.settings import parse_settings
from testground.kafka_broker import KafkaNode
from testground.secure_kafka import SecureListeners

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
# Where the example and the test cluster must differ: addresses and file locations.
PLACES = {"listeners", "advertised.listeners", "ssl.keystore.location", "ssl.truststore.location"}


def _block(lang: str, after: str) -> str:
    text = DOC.read_text()
    start = text.index(f"```{lang}\n", text.index(after)) + len(lang) + 4
    return text[start:text.index("```", start)]


def test_the_broker_properties_are_those_the_secured_test_cluster_runs(tmp_path: Path) -> None:
    doc = dict(line.split("=", 1) for line in _block("properties", "## The broker side")
               .splitlines() if line and not line.startswith("#"))
    tested = {k: str(v) for k, v in SecureListeners(tmp_path, with_expired_listener=False)
              .node_properties(KafkaNode(node_id=1), voters="").items()}
    assert set(doc) == set(tested), (sorted(set(tested) - set(doc)), sorted(set(doc) - set(tested)))
    for key in set(doc) - PLACES:
        assert doc[key] == tested[key], key
    names = lambda v: [x.split(":")[0] for x in v.split(",")]  # noqa: E731
    assert names(doc["listeners"]) == names(tested["listeners"])


def test_the_acl_lines_shown_are_those_cutover_init_prints() -> None:
    s = parse_settings({"bootstrap": "kafka-1.example.com:9094", "routes": [
        {"name": "orders", "inputs": ["orders.raw"], "output": "orders"}]})
    printed = {r.kafka_acls("User:cutover-router", s.bootstrap)
               for r in required_rights(s, Role.ROUTER, "orders")}
    shown = re.findall(r"kafka-acls\.sh .*?(?=\nkafka-acls|\n```|$)",
                       _block("sh", "Then the ACL lines").replace("\\\n  ", ""), re.S)
    assert shown and all(line.strip() in printed for line in shown), shown


def test_the_mutual_tls_listener_shown_is_the_one_the_secured_test_cluster_adds(
        tmp_path: Path) -> None:
    doc = dict(line.split("=", 1) for line in _block("properties", "## Mutual TLS")
               .splitlines() if line)
    node = KafkaNode(node_id=1)
    plain = SecureListeners(tmp_path / "a", with_expired_listener=False).node_properties(
        node, voters="")
    mtls = SecureListeners(tmp_path / "b", with_expired_listener=False, mtls=True
                           ).node_properties(node, voters="")
    added = {k: str(v) for k, v in mtls.items() if k not in plain}
    assert {k: v for k, v in doc.items() if not v.startswith("...")} == added
    assert doc["listener.security.protocol.map"].endswith(",MTLS:SSL")
    assert str(mtls["listener.security.protocol.map"]).endswith(",MTLS:SSL")
    for key in ("listeners", "advertised.listeners"):
        assert doc[key].split(",")[-1].split(":")[0] == "MTLS"
        assert "MTLS://" in str(mtls[key])
