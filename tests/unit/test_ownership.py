"""Only the owner of raw partition p writes output partition p (router.durability.ownership)."""

from __future__ import annotations

import pytest

from router.base.errors import OwnershipLost
from router.durability.ownership import check_ownership

INPUTS = {"r": ["r.blue", "r.green"]}


def test_owned_partitions_assigned_through_any_input_and_a_recent_poll_pass() -> None:
    check_ownership([("r", 0), ("r", 1)], INPUTS, {("r.blue", 0), ("r.green", 1)},
                    since_poll_s=1.0, max_poll_s=300.0)


def test_a_partition_no_longer_assigned_is_not_written() -> None:
    with pytest.raises(OwnershipLost, match="partition r/1 is no longer assigned"):
        check_ownership([("r", 0), ("r", 1)], INPUTS, {("r.blue", 0)}, 1.0, 300.0)


@pytest.mark.parametrize(("after_write", "what"), [
    (False, "the batch took later"), (True, "the batch's output was written later")])
def test_a_batch_past_most_of_the_poll_interval_counts_as_lost(after_write: bool,
                                                               what: str) -> None:
    with pytest.raises(OwnershipLost, match=what):
        check_ownership([("r", 0)], INPUTS, {("r.blue", 0)}, since_poll_s=241.0,
                        max_poll_s=300.0, after_write=after_write)
