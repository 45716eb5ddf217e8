"""The comparison of both versions' outputs (cutover.control.comparison): which event times
are compared, how records are matched, and what is counted."""

from __future__ import annotations

import json
from functools import partial

from cutover.control.comparison import Comparison, TaggedOutput, match_identity
from cutover.key_primary import in_canary
from router.rule.identity import key_event_time_identity


def data(version: str, i: int, batch: int, wm: int | None = None, *, p: int = 0,
         value: dict[str, object] | None = None) -> TaggedOutput:
    body = value if value is not None else {"id": i, "total": 10.5}
    return TaggedOutput(p, version, False, 1000 + i, wm, batch, f"k{i}".encode(),
                        json.dumps(body).encode())


def beat(version: str, batch: int, wm: int, *, p: int = 0) -> TaggedOutput:
    return TaggedOutput(p, version, True, None, wm, batch, None, b"")


def feed(c: Comparison, *recs: TaggedOutput) -> Comparison:
    for r in recs:
        c.add(r)
    return c


def stream(version: str, first: int, last: int, *, p: int = 0, change: set[int] = frozenset(),
           skip: set[int] = frozenset()) -> list[TaggedOutput]:
    """Batches of ten events (i in [10b, 10b+10)), each followed by its heartbeat."""
    out = []
    for b in range(first, last + 1):
        for i in range(10 * b, 10 * b + 10):
            if i in skip:
                continue
            value = {"id": i, "total": 11 if i in change else 10.5}
            out.append(data(version, i, b, p=p, value=value))
        out.append(beat(version, b, 1000 + 10 * b + 9, p=p))
    return out


def test_a_canary_s_comparison_counts_only_the_canary_s_keys_over_the_same_range() -> None:
    canary = partial(in_canary, buckets=2_500)   # a quarter of the keys
    others = {i for i in range(100) if not canary(f"k{i}".encode())}   # green differs there
    whole = feed(Comparison("blue", "green", key_event_time_identity, 0.0),
                 *stream("blue", 0, 9), *stream("green", 0, 9, change=others))
    keys = feed(Comparison("blue", "green", key_event_time_identity, 0.0, keys=canary),
                *stream("blue", 0, 9), *stream("green", 0, 9, change=others))
    assert not whole.summary().passed
    s = keys.summary()
    assert s.ranges == whole.summary().ranges == {0: (1009, 1099)}
    assert s.passed and s.counts.differing == 0
    inside = sum(canary(f"k{i}".encode()) for i in range(10, 99))
    assert s.counts.equal == inside and 0 < inside < 89


def test_equal_outputs_compare_equal_over_the_range_both_emitted_in_full() -> None:
    c = feed(Comparison("blue", "green", key_event_time_identity, 0.0),
             *stream("blue", 3, 9), *stream("green", 5, 9))
    s = c.summary()
    # green's first batch seen (5) may have started before the window: from above it; up to
    # the last heartbeat of either, below it
    assert s.ranges == {0: (1059, 1099)}
    assert s.partitions[0].equal == 39 and s.counts.differing == 0
    assert s.passed and s.diff_ratio == 0.0


def test_differences_and_one_sided_records_are_counted_with_samples() -> None:
    c = feed(Comparison("blue", "green", key_event_time_identity, 0.1, samples=3),
             *stream("blue", 0, 9, skip={71}), *stream("green", 0, 9, change={60, 61},
                                                         skip={80}))
    s = c.summary()
    counts = s.partitions[0]
    assert (counts.equal, counts.different, counts.only_old, counts.only_new) == (85, 2, 1, 1)
    assert s.diff_ratio == 4 / 89 and s.passed
    assert len(s.samples) == 3
    assert s.samples[0].endswith("total \"10.5\" -> 11") or s.samples[1].endswith(
        "total \"10.5\" -> 11")
    assert any("only in" in line for line in s.samples)
    assert "key 'k6" in s.samples[0] and "1970-01-01T00:00:01.06" in s.samples[0]


def test_numbers_are_compared_by_value_and_a_replay_counts_once() -> None:
    c = Comparison("blue", "green", key_event_time_identity, 0.0)
    feed(c, data("blue", 0, 0), beat("blue", 0, 999),
         data("blue", 5, 1, value={"id": 5, "total": 12.50}),
         data("blue", 5, 1, value={"id": 5, "total": 12.50}),   # replayed
         beat("blue", 1, 2000),
         data("green", 0, 0), beat("green", 0, 999),
         TaggedOutput(0, "green", False, 1005, None, 1, b"k5", b'{"total": 12.5, "id": 5}'),
         beat("green", 1, 2000))
    s = c.summary()
    assert s.partitions[0].equal == 1 and s.counts.total == 1


def test_partitions_are_compared_apart_and_a_partition_one_version_lacks_is_left_out() -> None:
    c = feed(Comparison("blue", "green", key_event_time_identity, 0.0),
             *stream("blue", 0, 3, p=0), *stream("green", 0, 3, p=0),
             *stream("blue", 0, 3, p=1))
    s = c.summary()
    assert set(s.ranges) == {0} and set(s.partitions) == {0}


def test_records_of_other_versions_are_ignored_and_nothing_in_common_fails() -> None:
    c = feed(Comparison("blue", "green", key_event_time_identity, 1.0),
             *stream("red", 0, 3), *stream("blue", 0, 3))
    s = c.summary()
    assert s.counts.total == 0 and not s.passed and "compare for longer" in s.headline()


def test_field_identities_match_by_fields_and_unreadable_records_are_counted() -> None:
    ident = match_identity(("id",))
    c = Comparison("blue", "green", ident, 0.5)
    feed(c, *stream("blue", 0, 3), *stream("green", 0, 3),
         TaggedOutput(0, "green", False, 1025, None, 2, b"x", b"not json"))
    s = c.summary()
    assert s.partitions[0].unreadable == 1 and s.partitions[0].equal == 29
    assert match_identity("record") is key_event_time_identity
