"""A client's fatal error that confluent-kafka raises beside a log line is handled as the fatal
error it is (router.base.kafka_io.fatal_behind).

confluent-kafka raises a fatal error (a transactional producer fenced by a newer one) from
inside the call serving the client's callbacks; a log line served in the same call then runs
the ``logger`` with that exception set, and the call ends in a SystemError whose cause is the
KafkaException. The chaos soak met it in a resumed zombie's commit."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from router.base.kafka_io import fatal_behind
from router.durability.output_writer import Sent
from router.durability.transactions import is_fenced


def _fenced() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._FENCED, "transactional producer fenced by "
                                     "newer producer instance", fatal=True))


def _beside_a_log_line(fatal: KafkaException) -> SystemError:
    try:
        try:
            raise fatal
        except KafkaException as exc:
            raise SystemError("<class 'logging.LogRecord'> returned a result with an exception "
                              "set") from exc
    except SystemError as exc:
        return exc


class _FlushRaises(Producer):
    """A producer whose flush fails as confluent-kafka's does when a fatal error meets a log
    line (the boundary under test is the router's handling, not the client)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
        self.error = error

    def flush(self, *args: object, **kwargs: object) -> int:
        raise self.error


def test_the_fatal_error_behind_a_system_error_is_found() -> None:
    fatal = _fenced()
    assert fatal_behind(_beside_a_log_line(fatal)) is fatal


def test_a_system_error_of_another_cause_is_not_taken_for_a_client_s() -> None:
    assert fatal_behind(SystemError("unrelated")) is None
    try:
        raise SystemError("chained") from ValueError("not a client's")
    except SystemError as exc:
        assert fatal_behind(exc) is None


def test_a_commit_s_output_check_raises_the_fatal_error_so_the_batch_ends_fenced() -> None:
    fatal = _fenced()
    producer = _FlushRaises(_beside_a_log_line(fatal))
    sent = Sent(writing=[], batch=[], producers={id(producer): producer}, errors={})
    with pytest.raises(KafkaException) as raised:
        sent.check(None, producer, 1.0)
    assert raised.value is fatal and is_fenced(raised.value)


def test_any_other_system_error_still_ends_the_check() -> None:
    producer = _FlushRaises(SystemError("unrelated"))
    sent = Sent(writing=[], batch=[], producers={id(producer): producer}, errors={})
    with pytest.raises(SystemError, match="unrelated"):
        sent.check(None, producer, 1.0)
