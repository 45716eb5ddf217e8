"""One fault cell's outcome, as the conformance document lists it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tests.soak.chaos import ChaosResult
from tests.soak.cluster_faults import FaultKind


class FaultCell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind
    repetition: int
    result: ChaosResult
    failures: list[str]     # empty exactly when the cell passes
    summary: str
