"""How the soak picks its faults' kinds."""

from __future__ import annotations

import random
from itertools import islice

from hypothesis import given
from hypothesis import strategies as st

from tests.soak.chaos import fault_kinds
from tests.soak.cluster_faults import FaultKind

KINDS = tuple(FaultKind)


@given(st.integers(min_value=0, max_value=2**32))
def test_every_round_of_faults_meets_every_kind_once(seed: int) -> None:
    drawn = list(islice(fault_kinds(random.Random(seed), KINDS), 3 * len(KINDS)))
    for i in range(3):
        assert sorted(drawn[i * len(KINDS):(i + 1) * len(KINDS)]) == sorted(KINDS)


def test_the_order_depends_on_the_seed_and_only_on_it() -> None:
    def first(seed: int) -> list[FaultKind]:
        return list(islice(fault_kinds(random.Random(seed), KINDS), 16))

    assert first(7) == first(7)
    assert len({tuple(first(seed)) for seed in range(20)}) > 1
