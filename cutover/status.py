"""Messages on the status topic (key = route name).

Every message carries the last good plan, so that a restarted router recovers it from the
status topic even when compaction left only a rejected record on the control topic.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from cutover.plan import CutoverPlan, utcnow


class TransitionState(StrEnum):
    STEADY = "STEADY"
    PENDING = "PENDING"
    # every condition of CLEAR_TO_TEARDOWN holds, but the plan's last segment has a canary:
    # the keys that moved are handed over, and the old version is still the primary of every
    # other key (and of the records without a key), so it must keep running
    HANDED_OVER = "HANDED_OVER"
    CLEAR_TO_TEARDOWN = "CLEAR_TO_TEARDOWN"
    STALLED = "STALLED"

    @property
    def clear(self) -> bool:
        """The transition's records are all handed over (with or without a canary)."""
        return self in (TransitionState.HANDED_OVER, TransitionState.CLEAR_TO_TEARDOWN)


class Holdup(BaseModel):
    """One reason a transition is not clear yet: a partition and the version holding it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int
    version: str | None = Field(description="the lagging version; null when the router itself "
                                            "still holds records")
    watermark: int | None
    needed: int
    why: str


class Transition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    boundary: int | None = None
    state: TransitionState = TransitionState.STEADY
    holdups: tuple[Holdup, ...] = ()
    share: float | None = Field(
        default=None, description="the share of the keys the plan's last segment gives its "
        "canary; absent from the JSON when the last segment has no canary, so a reader from "
        "before canaries reads every other status unchanged")

    @model_serializer(mode="wrap")
    def _without_absent_share(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if self.share is None:
            out.pop("share", None)
        return out

    def describe_holdups(self, limit: int = 8) -> str:
        parts = [f"partition {h.partition}: {h.why}" for h in self.holdups[:limit]]
        if len(self.holdups) > limit:
            parts.append(f"... and {len(self.holdups) - limit} more")
        return "; ".join(parts)


class PartitionStatus(BaseModel):
    """One raw partition as its owner sees it. ``epoch`` and ``boundary`` come from the
    partition's own decision state, so a reader needs no plan to know what it has applied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int | None = Field(default=None, description="plan epoch this partition has applied")
    boundary: int | None = Field(
        default=None, description="this partition's effective (maybe pinned) boundary of its "
                                  "last transition; null when its timeline has one primary")
    horizon: int | None = None
    watermarks: dict[str, int] = Field(default_factory=dict)
    pinned: tuple[int, ...] = ()
    held: int = 0
    paused: bool = Field(default=False, description="max_held records are held: records the "
                         "rule would hold are not kept, and are read again from the raw topic "
                         "when the old version releases the held ones")


class Counters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    forwarded: int = 0
    suppressed: dict[str, int] = Field(default_factory=dict)
    duplicates: int = 0
    dead_lettered: int = 0
    held: int = 0
    pauses: int = 0
    reread: int = 0

    def add(self, other: Counters) -> Counters:
        sup = dict(self.suppressed)
        for v, n in other.suppressed.items():
            sup[v] = sup.get(v, 0) + n
        return Counters(forwarded=self.forwarded + other.forwarded, suppressed=sup,
                        duplicates=self.duplicates + other.duplicates,
                        dead_lettered=self.dead_lettered + other.dead_lettered,
                        held=self.held + other.held, pauses=self.pauses + other.pauses,
                        reread=self.reread + other.reread)


class RouteStatus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event: Literal["status"] = "status"
    route: str
    epoch: int | None = None
    transition: Transition = Transition()
    partitions: dict[int, PartitionStatus] = Field(default_factory=dict)
    num_partitions: int | None = None
    counters: Counters = Counters()
    plan: CutoverPlan | None = None
    worker: str = ""
    updated_at: datetime = Field(default_factory=utcnow)


class PlanRejectedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event: Literal["plan_rejected"] = "plan_rejected"
    route: str
    epoch: int | None = None
    reason: str
    plan: CutoverPlan | None = Field(default=None, description="the last good plan, kept")
    worker: str = ""
    updated_at: datetime = Field(default_factory=utcnow)


StatusMessage = Annotated[RouteStatus | PlanRejectedEvent, Field(discriminator="event")]
status_adapter: TypeAdapter[RouteStatus | PlanRejectedEvent] = TypeAdapter(StatusMessage)


def parse_status(raw: bytes) -> RouteStatus | PlanRejectedEvent:
    return status_adapter.validate_json(raw)


class UnreadableStatus(NamedTuple):
    """A worker's status message this version cannot read, and why."""

    route: str
    worker: str
    reason: str


def unreadable_status(raw: bytes, exc: ValidationError) -> UnreadableStatus | None:
    """Why ``raw``, a status message that :func:`parse_status` refused, cannot be read, when
    it names its route and worker (None for anything else on the topic). The usual cause is a
    worker newer than the reader: status messages are strict (``extra="forbid"``), so a field
    added by a later version is refused rather than guessed at."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    route, worker = data.get("route"), data.get("worker")
    if not isinstance(route, str) or not isinstance(worker, str):
        return None
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first["loc"][1:]) or "(the message)"
    if first["type"] == "extra_forbidden":
        reason = f"field {where!r} is not known to this version of cutover"
    elif first["type"] == "union_tag_invalid":
        reason = f"event {data.get('event')!r} is not known to this version of cutover"
    else:
        reason = f"{where}: {first['msg']}"
    return UnreadableStatus(route, worker, reason)


def read_status(raw: bytes) -> RouteStatus | PlanRejectedEvent | UnreadableStatus | None:
    """``raw`` read as a status message: the message, or an :class:`UnreadableStatus` for a
    worker's message this version cannot read, or None for anything that is not a worker's
    status at all (so a reader skips it).

    Every reader of the status topic (the operator's view, a router recovering its plans) must
    tell these three apart the same way: a worker newer than the reader is worth naming, since
    its plan is not used, while garbage on the topic is not. One function keeps them from
    drifting apart; what to do with an unreadable worker (count it, log it) stays the caller's."""
    try:
        return parse_status(raw)
    except ValidationError as exc:
        return unreadable_status(raw, exc)
    except ValueError:
        return None
