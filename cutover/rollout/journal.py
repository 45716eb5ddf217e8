"""The rollout journal: what ``cutover rollout`` has done so far, one record per change on the
status topic under the key ``rollout/<route>``.

Every record is the whole state (like a plan is the whole timeline), so the newest record of
the key is all a resumed or aborting rollout needs, and compaction loses nothing. The running
rollout re-publishes its record every few seconds (``updated_at``): ``cutover status`` finds it
in the status topic's tail, and a second rollout of the route can tell a live owner from one
that died. Readers of the status topic that do not know this key skip it: its ``event`` is not
one of the status messages.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from cutover.headers import VersionId
from cutover.key_primary import Canary
from cutover.plan import CutoverPlan, utcnow
from cutover.validation import RouteName

JOURNAL_PREFIX = "rollout/"


def journal_key(route: str) -> bytes:
    return f"{JOURNAL_PREFIX}{route}".encode()


def route_of_key(key: bytes | None) -> str | None:
    """The route a status-topic key journals, or None when it is not a journal key."""
    if key is None or not key.startswith(JOURNAL_PREFIX.encode()):
        return None
    try:
        return key[len(JOURNAL_PREFIX):].decode()
    except UnicodeDecodeError:
        return None


class Phase(StrEnum):
    STARTING_NEW = "STARTING_NEW"
    CATCHING_UP = "CATCHING_UP"
    COMPARING = "COMPARING"
    SWITCHING = "SWITCHING"
    CANARY = "CANARY"       # a canary step's keys are handed over: watched for --canary-for
    DRAINING = "DRAINING"
    TEARING_DOWN = "TEARING_DOWN"
    SOAKING = "SOAKING"
    DONE = "DONE"
    ROLLING_BACK = "ROLLING_BACK"
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"

    @property
    def terminal(self) -> bool:
        return self in (Phase.DONE, Phase.ROLLED_BACK, Phase.FAILED)

    @property
    def old_still_running(self) -> bool:
        """Phases in which the old version has not been stopped: a rollback is possible."""
        return self in (Phase.STARTING_NEW, Phase.CATCHING_UP, Phase.COMPARING,
                        Phase.SWITCHING, Phase.DRAINING, Phase.CANARY)


class Gate(StrEnum):
    """A point where a rollout waits for ``cutover rollout promote`` (``--pause-before``)."""

    SWITCH = "switch"       # caught up (and compared): before the switch (or a canary step)
    #                         is published
    TEARDOWN = "teardown"   # CLEAR_TO_TEARDOWN: before the old version is stopped


class RequestKind(StrEnum):
    PROMOTE = "promote"
    PAUSE = "pause"
    RESUME = "resume"


class OperatorRequest(BaseModel):
    """What an operator asked of a running rollout, from any host: journaled with the change
    already applied (so a resumed run has it), and marked so that the run driving the rollout
    applies it too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RequestKind
    by: str
    at: datetime


class RolloutSpec(BaseModel):
    """What the operator asked for (the command line), kept so that ``--resume`` and
    ``--abort`` need only the route."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    route: RouteName
    old: VersionId
    new: VersionId
    start: str = Field(min_length=1, description="shell command that runs the new version")
    stop_old: str = Field(min_length=1, description="shell command that stops the old version")
    stop_new: str | None = Field(default=None, description="shell command that stops the new "
                                 "version; default: end the start command's process group")
    catch_up_lag_ms: int = Field(ge=0)
    compare: bool = False
    compare_for_ms: int = Field(default=120_000, gt=0)
    max_diff: float = Field(default=0.001, ge=0, le=1, description="fraction of compared "
                            "records allowed to differ")
    deadline_ms: int = Field(gt=0, description="from the start to CLEAR_TO_TEARDOWN")
    soak_ms: int = Field(ge=0)
    margin_ms: int = Field(default=10_000, ge=0, description="switch boundary ahead of every "
                           "partition's horizon")
    rollback_timeout_ms: int = Field(default=600_000, gt=0)
    stuck_after_ms: int = Field(default=180_000, gt=0, description="during a rollback, a new "
                                "version this long without watermark progress (a restart "
                                "included) is restarted again")
    log_dir: str
    pause_before: tuple[Gate, ...] = Field(default=(), description="gates where the rollout "
                                           "waits for `cutover rollout promote`")
    events: str | None = Field(default=None, description="file (or - for stdout) that gets one "
                               "JSON line per phase change")
    notify: str | None = Field(default=None, description="URL the same JSON is posted to")
    canary: tuple[float, ...] = Field(
        default=(), description="the shares of the keys the new version gets, step by step "
        "(cutover rollout --canary 5%,25%,100%); each larger than the one before, the last 1 "
        "(every key); empty: one whole switch")
    canary_for_ms: int = Field(default=600_000, gt=0, description="how long each canary "
                               "step is watched before the next")

    @model_serializer(mode="wrap")
    def _without_absent_steps(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a rollout without canary steps is journaled exactly as before they existed
        out: dict[str, Any] = handler(self)
        if not self.canary:
            out.pop("canary", None)
            out.pop("canary_for_ms", None)
        return out

    @model_validator(mode="after")
    def _steps_grow_to_every_key(self) -> RolloutSpec:
        steps = self.canary
        if not steps:
            return self
        for share in steps:
            Canary(version=self.new, share=share)   # a share the plan takes, or the reason
        if any(b <= a for a, b in pairwise(steps)):
            raise ValueError(f"canary steps {_shares(steps)} do not grow: give each step a "
                             "larger share than the one before")
        if steps[-1] != 1:
            raise ValueError(f"canary steps {_shares(steps)} end below 100%: a rollout ends "
                             "with every key on the new version, so end them with 100%")
        return self

    def step_share(self, step: int) -> float:
        """The share of the keys of canary step ``step`` (1: every key)."""
        return self.canary[step] if self.canary else 1.0

    def step_name(self, step: int) -> str:
        """``step 2/3 (25% of the keys)``, or ``the switch`` without canary steps."""
        if not self.canary:
            return "the switch"
        return f"step {step + 1}/{len(self.canary)} ({percent(self.canary[step])} of the keys)"


def percent(share: float) -> str:
    """``5%``, ``0.25%``: a share of the keys as a person writes it."""
    return f"{round(share * 100, 2):g}%"


def _shares(steps: tuple[float, ...]) -> str:
    return ",".join(percent(s) for s in steps)


class ProcessRef(BaseModel):
    """The new version's start command as launched: enough to watch and stop it from another
    run of the rollout on the same host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    host: str
    start_ticks: int | None = Field(description="the process's start time in clock ticks since "
                                                "boot (/proc), to tell it from a reused pid")
    log: str
    started_at: datetime


class Owner(BaseModel):
    """The run of ``cutover rollout`` that drives the rollout now."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(description="one run of the command (a resumed rollout gets a new one)")
    host: str
    pid: int


class PhaseSpan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase
    started_at: datetime
    ended_at: datetime | None = None

    def seconds(self, now: datetime) -> float:
        return ((self.ended_at or now) - self.started_at).total_seconds()


class CompareCounts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    equal: int = 0
    different: int = 0
    only_old: int = 0
    only_new: int = 0
    unreadable: int = Field(default=0, description="records whose identity could not be read")

    @property
    def total(self) -> int:
        return self.equal + self.different + self.only_old + self.only_new + self.unreadable

    @property
    def differing(self) -> int:
        return self.total - self.equal

    def add(self, other: CompareCounts) -> CompareCounts:
        return CompareCounts(equal=self.equal + other.equal,
                             different=self.different + other.different,
                             only_old=self.only_old + other.only_old,
                             only_new=self.only_new + other.only_new,
                             unreadable=self.unreadable + other.unreadable)


class CompareSummary(BaseModel):
    """The outcome of a comparison of both versions' outputs, as journaled and printed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    old: str
    new: str
    partitions: dict[int, CompareCounts]
    ranges: dict[int, tuple[int, int]] = Field(
        description="per partition the event times compared, exclusive at both ends")
    max_diff: float
    samples: tuple[str, ...] = ()

    @property
    def counts(self) -> CompareCounts:
        total = CompareCounts()
        for c in self.partitions.values():
            total = total.add(c)
        return total

    @property
    def diff_ratio(self) -> float:
        c = self.counts
        return c.differing / c.total if c.total else 1.0

    @property
    def passed(self) -> bool:
        return self.counts.total > 0 and self.diff_ratio <= self.max_diff

    def headline(self) -> str:
        c = self.counts
        if not c.total:
            return (f"no record of {self.old!r} and {self.new!r} fell in an event-time range "
                    "both emitted; compare for longer (--compare-for)")
        return (f"{c.total} records compared: {c.equal} equal, {c.different} different, "
                f"{c.only_old} only in {self.old}, {c.only_new} only in {self.new}"
                + (f", {c.unreadable} without identity" if c.unreadable else "")
                + f" ({self.diff_ratio:.2%} differ, limit {self.max_diff:.2%})")


class Trigger(StrEnum):
    """Why a rollout rolls back."""

    DEADLINE = "deadline"
    STALLED = "stalled"
    NEW_EXITED = "new_exited"
    START_FAILED = "start_failed"
    COMPARE = "compare"
    ABORT = "abort"

    @property
    def new_is_stuck(self) -> bool:
        """The new version is known not to progress: restart it at once if it owes records."""
        return self in (Trigger.DEADLINE, Trigger.STALLED)


class RollbackState(BaseModel):
    """Where a rollback is: the plan published, the new version's restarts and progress."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trigger: Trigger
    reason: str
    started_at: datetime
    epoch: int | None = Field(default=None, description="epoch of the rollback plan; None while "
                                                         "unpublished or when none is needed")
    restarts: int = 0
    new_marks: dict[int, int] = Field(default_factory=dict, description="the new version's "
                                      "watermarks when it last progressed")
    progress_at: datetime | None = None
    new_stopped: bool = False


class RolloutRecord(BaseModel):
    """One journal record: the whole state of one rollout of one route."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: Literal["rollout"] = "rollout"
    route: RouteName
    run_id: str = Field(description="this rollout, from its start to its end")
    claim: int = Field(ge=1, description="raised by each run that takes the rollout over; the "
                                         "first record of a claim in the log owns it")
    owner: Owner | None = Field(description="the run driving it; null once it let go")
    spec: RolloutSpec
    phase: Phase
    phases: tuple[PhaseSpan, ...] = ()
    note: str = ""
    started_at: datetime
    deadline_at: datetime
    base_plan: CutoverPlan = Field(description="the route's plan when the rollout started; a "
                                               "rollback returns to its timeline")
    new_process: ProcessRef | None = None
    compare: CompareSummary | None = None
    switch_epoch: int | None = None
    switch_boundary: int | None = None
    step: int = Field(default=0, ge=0, description="the canary step (index in spec.canary) "
                      "being published or in force; 0 without canary steps")
    rollback: RollbackState | None = None
    outcome: str | None = Field(default=None, description="the final sentence")
    abort_requested: str | None = Field(default=None, description="who asked to abort")
    promoted: tuple[Gate, ...] = Field(default=(), description="gates an operator let it pass")
    waiting_at: Gate | None = Field(default=None, description="the gate it waits at now")
    paused_by: str | None = Field(default=None, description="who paused it (cutover rollout "
                                  "pause); none while it runs")
    request: OperatorRequest | None = Field(default=None, description="set only on a record an "
                                            "operator's command wrote")
    updated_at: datetime = Field(default_factory=utcnow)

    @model_serializer(mode="wrap")
    def _without_absent_step(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not self.spec.canary:
            out.pop("step", None)
        return out

    def phase_started(self) -> datetime:
        return self.phases[-1].started_at if self.phases else self.started_at

    def step_line(self) -> str | None:
        """Where a rollout by key share is, e.g. ``step 2/3 (25% of the keys) of 5%, 25%,
        100%``; None for a rollout without canary steps."""
        steps = self.spec.canary
        if not steps:
            return None
        return f"{self.spec.step_name(self.step)} of {', '.join(percent(s) for s in steps)}"

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()


def parse_record(raw: bytes) -> RolloutRecord:
    return RolloutRecord.model_validate_json(raw)


LEASE = timedelta(seconds=20)   # a record not refreshed for this long has no live owner


def owner_alive(rec: RolloutRecord, now: datetime, host: str,
                pid_alive: bool | None) -> bool:
    """Whether the run named in ``rec`` may still be driving the rollout: on this host, its
    process (``pid_alive``, as the caller found it); elsewhere, a record refreshed within the
    lease."""
    if rec.owner is None or rec.phase.terminal:
        return False
    if rec.owner.host == host and pid_alive is not None:
        return pid_alive
    return now - rec.updated_at < LEASE
