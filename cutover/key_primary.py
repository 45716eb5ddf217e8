"""The primary of a key within one plan segment: the segment's primary, or its canary's version
for the keys in the canary's share of the buckets (cutover.key_bucket).

A segment's rule (:class:`KeyRule`) maps a record's bucket to the version that is primary for
it; a record without a key has no bucket and follows the segment's primary. A boundary between
two rules hands some keys (and maybe the keyless records) over from one version to another:
:func:`handovers` says which versions give and take, :func:`moves` whether a given key changes
primary there. Ordered handover holds a key's records only where its primary changes, and a
boundary is passed when every version that gives keys away there has passed it.

Pure: no I/O; the plan (cutover.plan), the router's rule (router.rule.decision) and the held-record
bound (router.rule.held_bound) all read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cutover.headers import VersionId
from cutover.key_bucket import BUCKETS, key_bucket

# A share must be a whole number of buckets; a float's rounding error is far below this.
_EXACT = 1e-6


class Canary(BaseModel):
    """A plan segment's canary: ``version`` is primary for the keys in the first
    ``share`` of the buckets, i.e. buckets ``0 .. round(share * 10000) - 1``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: VersionId
    share: float = Field(allow_inf_nan=False,
                         description="fraction of the 10,000 key buckets, in (0, 1], a whole "
                                     "number of basis points")

    @field_validator("share", mode="before")
    @classmethod
    def _a_number(cls, share: object) -> object:
        if isinstance(share, bool) or not isinstance(share, int | float):
            raise ValueError("share is a number in (0, 1], e.g. 0.05 for 5% of the keys")
        return share

    @field_validator("share")
    @classmethod
    def _whole_buckets(cls, share: float) -> float:
        if not 0 < share <= 1:
            raise ValueError(f"share {share:g} is outside (0, 1]: give a fraction of the keys "
                             "above 0 and at most 1, e.g. 0.05 for 5% of the keys")
        if abs(share * BUCKETS - round(share * BUCKETS)) > _EXACT:
            nearest = max(1, round(share * BUCKETS)) / BUCKETS
            raise ValueError(f"share {share:g} is not a whole number of basis points (one "
                             f"bucket of {BUCKETS} is 0.0001); round it, e.g. to {nearest:g}")
        return share

    @property
    def buckets(self) -> int:
        """How many buckets (from bucket 0) the canary's version is primary for."""
        return round(self.share * BUCKETS)


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Who is primary for each key within one segment. ``buckets``: the canary's buckets
    (0 without a canary)."""

    primary: str
    canary: str | None = None
    buckets: int = 0

    @classmethod
    def of(cls, primary: str, canary: Canary | None) -> KeyRule:
        if canary is None:
            return cls(primary)
        return cls(primary, canary.version, canary.buckets)

    @property
    def canary_spec(self) -> Canary | None:
        if self.canary is None:
            return None
        return Canary(version=self.canary, share=self.buckets / BUCKETS)

    def owner(self, bucket: int | None) -> str:
        """The primary for a record in ``bucket`` (None: a record without a key)."""
        if bucket is not None and bucket < self.buckets:
            return self.canary  # type: ignore[return-value]  # buckets > 0 only with a canary
        return self.primary

    def describe(self) -> str:
        if self.canary is None:
            return f"primary {self.primary!r}"
        return (f"primary {self.primary!r}, canary {self.canary!r} at "
                f"{self.buckets / BUCKETS:g}")


def bucket_of(key: bytes | None) -> int | None:
    """A record's bucket, or None for a record without a key."""
    return None if key is None else key_bucket(key)


def in_canary(key: bytes | None, buckets: int) -> bool:
    """Is a record with ``key`` among a canary's keys, the first ``buckets`` buckets? (A
    record without a key never is: it follows the segment's primary.)"""
    return key is not None and key_bucket(key) < buckets


def primary_for(rule: KeyRule, key: bytes | None) -> str:
    """The primary of a record with ``key`` under ``rule``."""
    if rule.canary is None:
        return rule.primary
    return rule.owner(bucket_of(key))


class Handover(NamedTuple):
    """At a boundary, ``old`` stops and ``new`` starts being primary for some records."""

    old: str
    new: str


def handovers(before: KeyRule, after: KeyRule) -> tuple[Handover, ...]:
    """Every (old, new) pair of primaries for the records whose primary changes from
    ``before`` to ``after``, each once, in order of first bucket (keyless records last)."""
    # the owner is constant between these bucket edges, so each stretch is probed once
    edges = sorted({0, before.buckets, after.buckets} - {BUCKETS})
    out: list[Handover] = []
    for b in (*edges, None):
        h = Handover(before.owner(b), after.owner(b))
        if h.old != h.new and h not in out:
            out.append(h)
    return tuple(out)


def moves(rules: Sequence[KeyRule], first: int, last: int, bucket: int | None) -> bool:
    """Does the primary of a record in ``bucket`` change at any boundary between segment
    ``first`` and segment ``last`` (``first < last``)?"""
    owner = rules[first].owner(bucket)
    return any(rules[i].owner(bucket) != owner for i in range(first + 1, last + 1))
