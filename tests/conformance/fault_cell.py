"""One fault cell's outcome, as the conformance document lists it, and the rules shared by the
fault cells and the canary cells: when a cell fails, and its one-line summary."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tests.soak.chaos import ChaosResult
from tests.soak.cluster_faults import FaultKind
from tests.soak.report import summary_line

STUCK_S = 60.0


class FaultCell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FaultKind
    repetition: int
    result: ChaosResult
    failures: list[str]     # empty exactly when the cell passes
    summary: str


def describe(r: ChaosResult) -> str:
    f = r.faults[0] if r.faults else None
    return (f"{r.verdict.forwarded}/{r.verdict.expected} records forwarded; "
            f"{summary_line(f) + ' after ' + f.fault.target if f else 'no fault'}"
            f"{''.join('; ' + n for n in (f.fault.notes if f else []) + r.notes)}")


def failures(r: ChaosResult) -> list[str]:
    """Why the cell fails; empty when it passes."""
    v = r.verdict
    out = [] if v.expected > 0 else ["the workload wrote nothing"]
    out += v.reasons
    if v.lost_samples:
        out.append(f"first lost: {v.lost_samples}")
    out += v.samples
    if len(r.faults) != 1:
        out.append(f"{len(r.faults)} faults injected instead of 1")
    for f in r.faults:
        if f.gap.excess_s > STUCK_S:
            out.append(f"partition {f.gap.partition}: output silent {f.gap.output_s} s against "
                       f"{f.gap.input_s} s of input")
    return out


class CanaryCell(BaseModel):
    """One run of a canary cell: a fault cell whose plans are a per-key canary's steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str               # e.g. "A"
    steps: list[str]        # the plan steps, as described (tests.soak.plans.Step.describe)
    kind: FaultKind
    repetition: int
    result: ChaosResult
    failures: list[str]     # empty exactly when the cell passes
    summary: str
