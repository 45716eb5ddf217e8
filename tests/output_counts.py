"""What a checker of a route's output counts, shared by the conformance grid's verifier
(tests/conformance/runner.py) and the chaos soak's checker (tests/soak/checker.py)."""

from __future__ import annotations

from pydantic import BaseModel


class OutputCounts(BaseModel):
    """Records expected on the output against what arrived, read ``read_committed``."""

    expected: int = 0
    forwarded: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong_version: int = 0
    unexpected: int = 0
    order_violations: int = 0
