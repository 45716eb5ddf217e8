"""Partitions the group gave to no member (router.worker.orphans): which ones count, and when
the worker makes the group rebalance to give them out."""

from __future__ import annotations

import itertools
import threading

from hypothesis import given
from hypothesis import strategies as st

from router.worker.orphans import (
    GRACE_S,
    MAX_WAIT_S,
    GroupView,
    OrphanClock,
    OrphanWatch,
    unheld,
)

SUBSCRIBED = {"r.raw": 4}


def view(held: set[int], stable: bool = True, members: tuple[str, ...] = ("me", "other")
         ) -> GroupView:
    return GroupView(stable=stable, members=frozenset(members),
                     held=frozenset(("r.raw", p) for p in held))


def test_partitions_of_the_subscription_no_member_holds_are_unheld() -> None:
    assert unheld(view({1, 3}), SUBSCRIBED, "me") == {("r.raw", 0), ("r.raw", 2)}
    assert unheld(view({0, 1, 2, 3}), SUBSCRIBED, "me") == frozenset()


def test_topics_outside_the_subscription_do_not_count() -> None:
    v = GroupView(stable=True, members=frozenset({"me"}),
                  held=frozenset({("r.raw", p) for p in range(4)} | {("ckpt", 0)}))
    assert unheld(v, SUBSCRIBED, "me") == frozenset()


def test_nothing_is_unheld_while_the_group_rebalances() -> None:
    """A rebalance in progress is about to assign them."""
    assert unheld(view(set(), stable=False), SUBSCRIBED, "me") == frozenset()


def test_nothing_is_unheld_in_a_group_this_worker_is_not_a_member_of() -> None:
    """Rejoining, or not joined yet: no member may subscribe to its topics at all."""
    assert unheld(view(set(), members=("other",)), SUBSCRIBED, "me") == frozenset()
    assert unheld(view(set()), SUBSCRIBED, None) == frozenset()


ORPHANS = frozenset({("r.raw", 0)})


def test_the_group_is_nudged_once_partitions_stay_unheld_for_the_grace() -> None:
    clock = OrphanClock()
    assert not clock.seen(ORPHANS, 0.0)
    assert not clock.seen(ORPHANS, GRACE_S - 0.1)
    assert clock.seen(ORPHANS, GRACE_S)


def test_unheld_partitions_given_out_within_the_grace_are_no_nudge() -> None:
    """A healthy cooperative rebalance leaves them unheld between its two rounds."""
    clock = OrphanClock()
    assert not clock.seen(ORPHANS, 0.0)
    assert not clock.seen(frozenset(), 1.0)
    assert not clock.seen(ORPHANS, 2.0)
    assert not clock.seen(ORPHANS, GRACE_S + 1.0)
    assert clock.seen(ORPHANS, GRACE_S + 2.0)


def test_a_nudge_that_did_not_help_is_repeated_after_a_doubling_wait() -> None:
    clock = OrphanClock()
    nudges = [t for t in range(0, 400) if clock.seen(ORPHANS, float(t))]
    gaps = [b - a for a, b in itertools.pairwise(nudges)]
    assert gaps[:3] == [2 * GRACE_S, 4 * GRACE_S, 8 * GRACE_S]
    assert max(gaps) == MAX_WAIT_S


def test_the_wait_starts_again_once_nothing_is_unheld() -> None:
    clock = OrphanClock()
    for t in range(0, 30):
        clock.seen(ORPHANS, float(t))
    assert not clock.seen(frozenset(), 30.0)
    assert not clock.seen(ORPHANS, 31.0)
    assert clock.seen(ORPHANS, 31.0 + GRACE_S)


@given(st.lists(st.booleans(), max_size=200))
def test_nudges_are_never_closer_than_the_grace(looks: list[bool]) -> None:
    clock = OrphanClock()
    nudges = [float(t) for t, some in enumerate(looks)
              if clock.seen(ORPHANS if some else frozenset(), float(t))]
    assert all(b - a >= GRACE_S for a, b in itertools.pairwise(nudges))


def test_the_watch_reports_what_it_saw_as_metrics() -> None:
    watch = OrphanWatch({}, {"group.id": "g"}, "ckpt", SUBSCRIBED, lambda: "me",
                        threading.Event())
    watch.look(view({1, 2, 3}), 0.0)
    text = watch.prometheus()
    assert "cutover_group_unheld_partitions 1" in text.splitlines()
    assert "cutover_group_nudges_total 0" in text.splitlines()
