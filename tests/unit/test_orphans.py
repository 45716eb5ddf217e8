"""The nudger (router.worker.orphans): every time the data consumer takes its instance's place,
the group is made to rebalance once after it, never from the data thread. The join itself is
the broker's (tests/integration/test_group_orphans.py); here it is replaced by a gate the test
opens."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from router.worker import orphans
from router.worker.orphans import Nudger


class Joins:
    """Stands in for the group join: counts the nudges and holds each until released."""

    def __init__(self) -> None:
        self.started = 0
        self.gate = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.topics: list[str] = []

    def __call__(self, conf: dict[str, Any], topic: str, stop: threading.Event | None = None,
                 timeout_s: float = 0.0) -> bool:
        with self.lock:
            self.started += 1
            self.topics.append(topic)
        self.gate.acquire(timeout=10)
        return True


def wait_until(done: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        time.sleep(0.01)
    assert done()


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> Joins:
    j = Joins()
    monkeypatch.setattr(orphans, "nudge", j)
    return j


def nudger() -> Nudger:
    return Nudger({"group.id": "g", "group.instance.id": "w1"}, "ckpt", threading.Event())


def test_taking_the_instance_s_place_makes_the_group_rebalance_once(joins: Joins) -> None:
    n = nudger()
    n.replaced("the worker started")
    wait_until(lambda: joins.started == 1)
    joins.gate.release()
    wait_until(lambda: not n.running)
    assert joins.started == 1 and n.nudges == 1
    assert joins.topics == ["ckpt"]   # the checkpoint topic: no raw partition is taken


def test_the_caller_does_not_wait_for_the_rebalance(joins: Joins) -> None:
    n = nudger()
    began = time.monotonic()
    n.replaced("the worker started")   # the join is held at the gate
    assert time.monotonic() - began < 1.0
    joins.gate.release()


def test_a_place_taken_again_during_a_nudge_is_followed_by_one_more(joins: Joins) -> None:
    """The last replacement is always followed by a whole rebalance; those in between are
    served by one."""
    n = nudger()
    n.replaced("the worker started")
    wait_until(lambda: joins.started == 1)
    n.replaced("its session was lost")
    n.replaced("the worker rebuilt it")
    joins.gate.release()
    wait_until(lambda: joins.started == 2)
    joins.gate.release()
    wait_until(lambda: not n.running)
    assert joins.started == 2 and n.nudges == 2


def test_the_nudges_are_counted_as_a_metric(joins: Joins) -> None:
    n = nudger()
    n.replaced("the worker started")
    joins.gate.release()
    wait_until(lambda: not n.running)
    assert "cutover_group_nudges_total 1" in n.prometheus().splitlines()
