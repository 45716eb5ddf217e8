"""What the rollout's phase machine hears and says: what the driver observed (the new
version's process, the route as the router reports it), the results of the actions it ran
(events), and the actions the machine asks for. Plain data, so the machine stays pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from cutover.plan import CutoverPlan, Segment
from cutover.rollout.journal import CompareSummary, ProcessRef, RequestKind, RolloutRecord
from cutover.status import Transition

NO_WATERMARK = -(1 << 63)


# -- what the driver observes -------------------------------------------------------------------


class ProcState(StrEnum):
    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"   # started on another host: only the route tells


class NewProcess(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    state: ProcState
    exit_code: int | None = None


class PartitionFacts(BaseModel):
    """One partition as the router's status reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int | None = None
    boundary: int | None = None
    horizon: int | None = None
    watermarks: dict[str, int] = Field(default_factory=dict)
    pinned: tuple[int, ...] = ()
    held: int = 0

    def mark(self, version: str) -> int:
        return self.watermarks.get(version, NO_WATERMARK)


class RouteFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: CutoverPlan | None
    num_partitions: int
    partitions: dict[int, PartitionFacts]
    transition: Transition


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    now: datetime
    new: NewProcess
    route: RouteFacts
    compare_running: bool = False


# -- events -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    obs: Observation


@dataclass(frozen=True)
class NewStarted:
    ref: ProcessRef


@dataclass(frozen=True)
class StartFailed:
    reason: str


@dataclass(frozen=True)
class CompareDone:
    summary: CompareSummary


@dataclass(frozen=True)
class CompareFailed:
    reason: str


@dataclass(frozen=True)
class SwitchPublished:
    epoch: int
    boundary: int


@dataclass(frozen=True)
class SwitchRefused:
    reason: str


@dataclass(frozen=True)
class OldStopped:
    exit_code: int


@dataclass(frozen=True)
class RollbackPublished:
    epoch: int


@dataclass(frozen=True)
class NewStopped:
    pass


@dataclass(frozen=True)
class NewRestarted:
    ref: ProcessRef


@dataclass(frozen=True)
class AbortRequested:
    by: str


@dataclass(frozen=True)
class Requested:
    """An operator's promote, pause or resume (``cutover rollout promote|pause|resume``)."""

    kind: RequestKind
    by: str


Event = (Tick | NewStarted | StartFailed | CompareDone | CompareFailed | SwitchPublished
         | SwitchRefused | OldStopped | RollbackPublished | NewStopped | NewRestarted
         | AbortRequested | Requested)


# -- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartNew:
    pass


@dataclass(frozen=True)
class RestartNew:
    pass


@dataclass(frozen=True)
class StopNew:
    pass


@dataclass(frozen=True)
class StartCompare:
    share: float | None = None   # compare only the keys of a canary of this share


@dataclass(frozen=True)
class PublishSwitch:
    deadline: datetime
    share: float = 1.0   # below 1: a canary step giving the new version this share of the keys


@dataclass(frozen=True)
class PublishRollback:
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class StopOld:
    pass


Action = StartNew | RestartNew | StopNew | StartCompare | PublishSwitch | PublishRollback | StopOld


@dataclass(frozen=True)
class Step:
    record: RolloutRecord
    actions: tuple[Action, ...] = ()
