"""What a broker serves, asked of the broker: the API keys of its ApiVersions answer.

The router's exactly-once output (router.durability.transactions) rests on ``read_committed``
consumers not seeing aborted records. A broker hides them through the markers its transaction
coordinator writes into each partition of an ended transaction (``WriteTxnMarkers``); a broker that
serves the client's transaction APIs but not the marker one (Tansu, the demo's embedded broker)
hands aborted records to ``read_committed`` consumers. So transactions are used where the broker
answers that it serves all of :data:`TRANSACTION_APIS`.

How the answer is read: librdkafka asks each broker it connects to for its ApiVersions and
logs the answer at debug level (``debug=feature``, facility ``APIVERSION``); confluent-kafka
gives no other reading of it. The probe connects one admin client with the caller's settings,
so TLS and SASL are those of the router's own clients, and reads that log.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# The API keys (Kafka protocol numbers) a broker serves when transactions work end to end.
TRANSACTION_APIS: dict[int, str] = {
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
}

log = logging.getLogger("cutover.broker_capabilities")

PROBE_TIMEOUT_S = 10.0
# librdkafka's line for one API of a broker's answer, e.g.
# "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap:   ApiKey EndTxn (26) Versions 0..4"
_LINE = re.compile(r"^(?:\[thrd:[^\]]*\]: )?(?P<broker>\S+?): (?P<text>.*)$")
_API = re.compile(r"^\s+ApiKey \S+ \((?P<key>\d+)\) Versions \d+\.\.\d+")
_FACILITY = "APIVERSION"
# Client settings of the caller's that the probe's own logging replaces.
_LOGGING_KEYS = ("logger", "log_level", "debug")


class _ApiVersionsLog:
    """librdkafka's logger: keeps the API keys of the first broker whose answer is complete."""

    def __init__(self) -> None:
        self.keys: dict[str, set[int]] = {}
        self.answer: frozenset[int] | None = None

    def log(self, level: int, fmt: str, *args: object) -> None:
        # confluent-kafka calls log(level, "%s [%s] %s", facility, client name, message).
        if self.answer is not None or len(args) != 3 or args[0] != _FACILITY:
            return
        line = _LINE.match(str(args[2]))
        if line is None:
            return
        api = _API.match(line["text"])
        if api is not None:
            self.keys.setdefault(line["broker"], set()).add(int(api["key"]))
        elif self.keys.get(line["broker"]):
            # Any other line of a broker after its API lines ends that broker's answer.
            self.answer = frozenset(self.keys[line["broker"]])


def broker_api_keys(conf: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> frozenset[int]:
    """The API keys the broker at ``conf['bootstrap.servers']`` answers ApiVersions with.

    ``conf``: the settings of the caller's clients (bootstrap, security). Raises
    :class:`ConnectionError` when no broker answers within ``timeout``.
    """
    answer = _ApiVersionsLog()
    settings = {k: v for k, v in conf.items() if k not in _LOGGING_KEYS}
    admin = AdminClient({**settings, "debug": "feature", "log_level": 7, "logger": answer})
    deadline = time.monotonic() + timeout
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ConnectionError(
            f"no broker at {conf.get('bootstrap.servers')} answered within {timeout:.0f}s "
            f"({exc}): check the bootstrap address and the client's security settings"
        ) from exc
    while answer.answer is None and time.monotonic() < deadline:
        admin.poll(0.1)
    if answer.answer is None:
        raise ConnectionError(
            f"the broker at {conf.get('bootstrap.servers')} did not answer ApiVersions within "
            f"{timeout:.0f}s: check that it speaks the Kafka protocol"
        )
    return answer.answer


def missing_transaction_apis(keys: frozenset[int]) -> list[str]:
    """The transaction APIs (by name) a broker with API ``keys`` does not serve."""
    return [name for key, name in sorted(TRANSACTION_APIS.items()) if key not in keys]


def serves_transactions(conf: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the broker serves every API that Kafka transactions need (see the module).

    A broker that does not answer is taken to serve them, as Apache Kafka does: a transactional
    producer's ``init_transactions`` then fails with the broker's own error, which says more
    than this probe could.
    """
    try:
        keys = broker_api_keys(conf, timeout)
    except ConnectionError as exc:
        log.warning("could not ask the broker which APIs it serves (%s); "
                    "transactions are taken to work", exc)
        return True
    missing = missing_transaction_apis(keys)
    if missing:
        log.info("the broker does not serve %s: transactions are off "
                 "(read_committed would not hide aborted records)", ", ".join(missing))
    return not missing
