"""The router decides whether to write in transactions by what the broker answers, not by its name:
Apache Kafka lists every transaction API in its ApiVersions answer, the transaction markers that
hide aborted records from read_committed consumers included; Tansu lists the client's
transaction APIs but not the markers, so ``transactions: auto`` is on for the first and off for
the second."""

from __future__ import annotations

from pathlib import Path

import pytest

from cutover.broker_capabilities import (
    TRANSACTION_APIS,
    broker_api_keys,
    missing_transaction_apis,
    serves_transactions,
)
from cutover.demo_broker import EmbeddedBroker, free_port
from cutover.settings import RouterSettings, Transactions, parse_settings
from router.base.kafka_io import base_conf
from router.durability.transactions import transactions_on
from testground.brokers import BrokerUnderTest

API_VERSIONS, METADATA, PRODUCE, FETCH = 18, 3, 0, 1
WRITE_TXN_MARKERS = 27


def auto_settings(bootstrap: str, tmp_path: Path) -> RouterSettings:
    return parse_settings({
        "bootstrap": bootstrap, "state_dir": str(tmp_path / "state"), "http_port": None,
        "transactions": "auto",
        "routes": [{"name": "orders", "inputs": ["orders.raw"], "output": "orders"}]})


@pytest.mark.broker
def test_apache_kafka_answers_that_it_serves_every_transaction_api(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    if broker.kind != "kafka":
        pytest.skip(f"the suite's broker is {broker.describe()}, not an Apache Kafka it started")
    keys = broker_api_keys(base_conf(broker.bootstrap))
    assert {API_VERSIONS, METADATA, PRODUCE, FETCH} <= keys
    assert set(TRANSACTION_APIS) <= keys
    assert missing_transaction_apis(keys) == []
    assert serves_transactions(base_conf(broker.bootstrap))
    assert transactions_on(auto_settings(broker.bootstrap, tmp_path))


def test_tansu_answers_without_the_transaction_markers(tmp_path: Path) -> None:
    with EmbeddedBroker() as tansu:
        keys = broker_api_keys(base_conf(tansu.bootstrap))
        assert {API_VERSIONS, METADATA, PRODUCE, FETCH} <= keys
        assert set(TRANSACTION_APIS) - {WRITE_TXN_MARKERS} <= keys
        assert missing_transaction_apis(keys) == ["WriteTxnMarkers"]
        assert not serves_transactions(base_conf(tansu.bootstrap))
        settings = auto_settings(tansu.bootstrap, tmp_path)
        assert not transactions_on(settings)
        assert transactions_on(settings.model_copy(update={"transactions": Transactions.ON}))


def test_a_broker_that_does_not_answer_is_named_with_what_to_check() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError, match=rf"no broker at {nobody} answered within 2s.*"
                                              r"check the bootstrap address"):
        broker_api_keys(base_conf(nobody), timeout=2.0)
    # The router's own clients then fail with the broker's error: the probe does not guess off.
    assert serves_transactions(base_conf(nobody), timeout=2.0)
