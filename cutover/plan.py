"""The cutover plan: the whole event-time timeline of a route, one record per route on the
compacted control topic.

A plan is validated here and only here; the router, the CLI and ``cutover plan validate`` all
call :func:`parse_plan`, so an operator sees exactly the reason the router would give.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from cutover.headers import VersionId
from cutover.key_primary import Canary, KeyRule, bucket_of, handovers
from cutover.secret_refs import PLAN_KEY_ENV, plan_signing_key
from cutover.validation import RouteName, describe

MAX_PLAN_BYTES = 64 * 1024
MAX_SEGMENTS = 1000

class PlanRejected(ValueError):
    """A plan that cannot be used; ``reason`` is what the status topic and the CLI show."""

    def __init__(self, reason: str, epoch: int | None = None, route: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.epoch = epoch
        self.route = route


class Segment(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    from_event_time: int | None = Field(
        description="first event time (epoch ms) of this segment; null only for the first"
    )
    primary: VersionId
    canary: Canary | None = Field(
        default=None, description="a share of the keys whose primary is another version "
                                  "(cutover.key_primary); absent from the JSON when none")

    @model_validator(mode="after")
    def _canary_is_another_version(self) -> Segment:
        if self.canary is not None and self.canary.version == self.primary:
            raise ValueError(f"canary version {self.primary!r} is the segment's primary; a "
                             "canary names the version that takes a share of the keys")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_canary(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a plan without a canary is written exactly as before canaries existed
        out: dict[str, Any] = handler(self)
        if self.canary is None:
            out.pop("canary", None)
        return out

    @property
    def rule(self) -> KeyRule:
        return KeyRule.of(self.primary, self.canary)


class CutoverPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    route: RouteName
    epoch: int = Field(ge=0)
    segments: tuple[Segment, ...] = Field(min_length=1, max_length=MAX_SEGMENTS)
    deadline: datetime | None = None
    issued_at: datetime | None = None
    issued_by: str | None = Field(default=None, max_length=256)
    signature: str | None = Field(default=None, description="hex HMAC-SHA256, see sign_plan")

    @field_validator("deadline", "issued_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry a time zone (e.g. 2026-01-01T00:10:00Z)")
        return value

    @model_validator(mode="after")
    def _timeline(self) -> CutoverPlan:
        first, rest = self.segments[0], self.segments[1:]
        if first.from_event_time is not None:
            raise ValueError("the first segment must have from_event_time null (it starts the "
                             "timeline)")
        previous = first
        for i, seg in enumerate(rest, start=1):
            if seg.from_event_time is None:
                raise ValueError(f"segment {i} has from_event_time null; only the first may")
            if previous.from_event_time is not None and \
                    seg.from_event_time <= previous.from_event_time:
                raise ValueError(
                    f"segment {i} starts at {seg.from_event_time}, not after segment {i - 1} "
                    f"({previous.from_event_time}): boundaries must strictly increase")
            _check_neighbours(i, previous, seg)
            previous = seg
        return self

    # -- timeline ---------------------------------------------------------------------------

    @property
    def boundaries(self) -> list[int]:
        return [s.from_event_time for s in self.segments[1:]]  # type: ignore[misc]

    def segment_at(self, event_time: int) -> Segment:
        return self.segments[bisect.bisect_right(self.boundaries, event_time)]

    def primary_at(self, event_time: int) -> str:
        """The segment's primary at ``event_time``: the primary of a record without a key
        (and of every record where no canary is in force)."""
        return self.segment_at(event_time).primary

    def primary_for(self, key: bytes | None, event_time: int) -> str:
        """The primary of a record with ``key`` at ``event_time``: a function of the plan,
        the key and the event time only (cutover.key_primary)."""
        return self.segment_at(event_time).rule.owner(bucket_of(key))

    @property
    def has_canary(self) -> bool:
        return any(s.canary is not None for s in self.segments)

    @property
    def transition(self) -> tuple[str, str, int] | None:
        """The last handover of the timeline: (from, to, boundary), or None when steady.
        With a canary, ``from`` gives the keys that move at the last boundary to ``to``
        (a valid plan moves keys from one version to one other at each boundary)."""
        if len(self.segments) < 2:
            return None
        a, b = self.segments[-2], self.segments[-1]
        h = handovers(a.rule, b.rule)[0]
        return h.old, h.new, b.from_event_time  # type: ignore[return-value]

    def versions(self) -> set[str]:
        return {s.primary for s in self.segments} | {
            s.canary.version for s in self.segments if s.canary is not None}

    # -- wire ---------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()

    def signing_payload(self) -> bytes:
        """Canonical bytes that the signature covers: the plan without its signature."""
        body = self.model_dump(mode="json", exclude={"signature"})
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _check_neighbours(i: int, before: Segment, seg: Segment) -> None:
    """Segment ``i`` after ``before``: each boundary hands keys from one version to one other,
    and within a canary the share only grows (a key never moves back and forth)."""
    if seg.rule == before.rule:
        if seg.canary is None:
            raise ValueError(f"segment {i} repeats primary {seg.primary!r} of segment "
                             f"{i - 1}; merge them")
        raise ValueError(f"segment {i} repeats segment {i - 1} ({seg.rule.describe()}); "
                         "merge them")
    old, new = before.canary, seg.canary
    if new is not None and seg.primary != before.primary:
        start = "keeps" if old is not None else "starts"
        raise ValueError(
            f"segment {i} makes {seg.primary!r} primary and {start} canary {new.version!r} "
            f"at once: a canary runs on the previous segment's primary ({before.primary!r}); "
            "switch the primary in a segment without a canary")
    if old is None or new is None:
        if old is not None and seg.primary not in (before.primary, old.version):
            raise ValueError(
                f"segment {i} gives every key to {seg.primary!r}, which is neither segment "
                f"{i - 1}'s primary {before.primary!r} (a rollback) nor its canary "
                f"{old.version!r} (the full switch); end the canary with one of those first")
        return
    if new.version != old.version:
        raise ValueError(
            f"segment {i} changes the canary from {old.version!r} to {new.version!r}: end "
            f"the canary of {old.version!r} first (a segment without a canary)")
    if new.buckets < old.buckets:
        raise ValueError(
            f"segment {i} gives canary {new.version!r} a share of {new.share:g}, less than "
            f"segment {i - 1}'s {old.share:g}: shares only grow (a key would move back to "
            f"{seg.primary!r}); to roll back, start a segment without a canary")


def sign_plan(plan: CutoverPlan, key: bytes) -> CutoverPlan:
    digest = hmac.new(key, plan.signing_payload(), hashlib.sha256).hexdigest()
    return plan.model_copy(update={"signature": digest})


def plan_key_from_env() -> bytes | None:
    """The signing key: ``CUTOVER_PLAN_KEY``, or the file ``CUTOVER_PLAN_KEY_FILE`` names."""
    return plan_signing_key()


def parse_plan(
    raw: bytes | str | dict[str, Any] | None,
    *,
    route: str | None = None,
    key: bytes | None = None,
) -> CutoverPlan:
    """Validate one control-topic value (None: a tombstone, rejected); raise
    :class:`PlanRejected` with a reason.

    ``route`` is the record key (the plan must name the same route); ``key`` is the signing key,
    and when it is set an unsigned or badly signed plan is rejected.
    """
    epoch: int | None = None
    if isinstance(raw, dict):
        data: Any = raw
    else:
        if raw is None:
            raise PlanRejected("empty value (a tombstone is not a plan)", route=route)
        if len(raw) > MAX_PLAN_BYTES:
            raise PlanRejected(f"plan is {len(raw)} bytes, over the {MAX_PLAN_BYTES} limit",
                               route=route)
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PlanRejected(f"not JSON ({exc})", route=route) from None
    if not isinstance(data, dict):
        raise PlanRejected(f"a plan is a JSON object, not {type(data).__name__}", route=route)
    if isinstance(data.get("epoch"), int):
        epoch = data["epoch"]
    try:
        plan = CutoverPlan.model_validate(data)
    except ValidationError as exc:
        raise PlanRejected("; ".join(describe(exc)), epoch=epoch, route=route) from None
    if route is not None and plan.route != route:
        raise PlanRejected(f"plan names route {plan.route!r} but was published under key "
                           f"{route!r}", epoch=plan.epoch, route=route)
    if key is not None:
        if not plan.signature:
            raise PlanRejected("unsigned plan (this router requires signed plans; sign with "
                               f"{PLAN_KEY_ENV})", epoch=plan.epoch, route=plan.route)
        expected = hmac.new(key, plan.signing_payload(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, plan.signature):
            raise PlanRejected("bad plan signature", epoch=plan.epoch, route=plan.route)
    return plan


class PlanBook:
    """The last good plan of each route, fed with every control-topic record.

    Stale epochs are ignored, invalid plans rejected with a reason, and neither ever replaces
    the plan held. Pure: the caller publishes the outcome.
    """

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.plans: dict[str, CutoverPlan] = {}

    def offer(self, route: str | None, raw: bytes | None) -> tuple[str, CutoverPlan | PlanRejected]:
        """Return ``("accepted", plan)``, ``("stale", plan)`` or ``("rejected", PlanRejected)``."""
        try:
            if route is None:
                raise PlanRejected("control record has no key (the key is the route name)")
            plan = parse_plan(raw, route=route, key=self.key)
        except PlanRejected as rejected:
            return "rejected", rejected
        held = self.plans.get(plan.route)
        if held is not None and plan.epoch <= held.epoch:
            return "stale", plan
        self.plans[plan.route] = plan
        return "accepted", plan

    def restore(self, plan: CutoverPlan) -> None:
        """Adopt a plan known good from elsewhere (the status topic after a restart)."""
        held = self.plans.get(plan.route)
        if held is None or plan.epoch > held.epoch:
            self.plans[plan.route] = plan


def utcnow() -> datetime:
    return datetime.now(UTC)
