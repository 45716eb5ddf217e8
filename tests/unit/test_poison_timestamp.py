"""The poison-timestamp rule: a data record stamped implausibly far ahead of the time it was
written goes to the dead-letter topic and moves nothing (horizon, retention window, pins)."""

from __future__ import annotations

from rule_support import SetStore, make_plan

from router.rule.decision import Incoming, Outcome, PartitionRouter
from router.rule.identity import identity_function

TOL = 60_000
NOW = 1_767_225_600_000
TEN_YEARS = 10 * 365 * 86_400_000
BLUE = make_plan(1, (None, "blue"))


def router(*, ordered: bool = False, retention_ms: int = 3_600_000) -> PartitionRouter:
    return PartitionRouter(0, identity=identity_function("record"), store=SetStore(),
                           retention_ms=retention_ms, ordered=ordered,
                           future_tolerance_ms=TOL)


def rec(version: str, t: int, written_at: int | None = NOW, key: bytes = b"k") -> Incoming:
    return Incoming(version, t, None, key, f"{version}:{t}".encode(), written_at=written_at)


def decide(r: PartitionRouter, inc: Incoming) -> Outcome:
    """The data path's calls for a well-formed data record."""
    if r.suppresses(inc.version, inc.event_time, inc.written_at):
        return Outcome.SUPPRESS
    return r.decide(inc).outcome


def test_a_record_ten_years_ahead_is_dead_lettered_and_moves_nothing() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert r.observe(rec("blue", NOW - 5))[0].outcome is Outcome.FORWARD
    (d,) = r.observe(rec("blue", NOW + TEN_YEARS))
    assert d.outcome is Outcome.DEAD_LETTER
    assert "future_tolerance_ms (60000 ms)" in d.reason and "poison" in d.reason
    assert r.horizon == NOW - 5 and r.counters.dead_lettered == 1
    # the partition keeps flowing: nothing later is taken for older than the retention
    assert [decide(r, rec("blue", NOW + i)) for i in range(5)] == [Outcome.FORWARD] * 5


def test_the_other_versions_poison_record_is_dead_lettered_not_suppressed() -> None:
    """Suppression moves the horizon too: the rule comes first."""
    r = router()
    r.apply_plan(BLUE)
    r.observe(rec("blue", NOW))
    assert decide(r, rec("green", NOW + TEN_YEARS)) is Outcome.DEAD_LETTER
    assert r.horizon == NOW and r.counters.suppressed == {}
    assert decide(r, rec("green", NOW + 1)) is Outcome.SUPPRESS


def test_the_tolerance_is_the_edge() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert decide(r, rec("blue", NOW + TOL)) is Outcome.FORWARD
    assert decide(r, rec("blue", NOW + TOL + 1)) is Outcome.DEAD_LETTER
    assert decide(r, rec("green", NOW + TOL + 1)) is Outcome.DEAD_LETTER
    assert decide(r, rec("green", NOW + TOL)) is Outcome.SUPPRESS


def test_backfills_of_old_event_time_are_not_poison() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert decide(r, rec("blue", NOW - TEN_YEARS)) is Outcome.FORWARD
    assert decide(r, rec("blue", NOW - TEN_YEARS + 1)) is Outcome.FORWARD


def test_no_write_time_means_no_check() -> None:
    """Kafka's "no timestamp" is -1; a record without one cannot be judged."""
    r = router()
    r.apply_plan(BLUE)
    assert decide(r, rec("blue", NOW + TEN_YEARS, written_at=-1)) is Outcome.FORWARD
    assert decide(r, rec("blue", NOW + TEN_YEARS + 1, written_at=None)) is Outcome.FORWARD


def test_a_poison_record_moves_no_pin() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.observe(rec("blue", NOW))
    r.observe(rec("blue", NOW + TEN_YEARS))
    r.apply_plan(make_plan(2, (None, "blue"), (NOW + 1_000, "green")))
    assert r.pinned == () and r.boundary == NOW + 1_000


def test_a_poison_record_is_not_held_before_a_plan() -> None:
    r = router(ordered=True)
    (d,) = r.observe(rec("blue", NOW + TEN_YEARS))
    assert d.outcome is Outcome.DEAD_LETTER and r.held == []


def test_replay_decides_a_poison_record_the_same_way() -> None:
    """"Now" travels with the record: a restored router, later, decides it as the first."""
    r = router()
    r.apply_plan(BLUE)
    r.observe(rec("blue", NOW))
    snap = r.snapshot()
    first = [decide(r, rec("blue", NOW + 2 * TOL)), decide(r, rec("blue", NOW + 10))]
    again = router()
    again.restore(snap)
    assert [decide(again, rec("blue", NOW + 2 * TOL)),
            decide(again, rec("blue", NOW + 10))] == first == [Outcome.DEAD_LETTER,
                                                                Outcome.FORWARD]
    assert again.snapshot() == r.snapshot()
