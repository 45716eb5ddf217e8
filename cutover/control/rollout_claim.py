"""The rollout journal on the status topic: publishing a record, and claiming a rollout so that
two runs never drive one route at once.

A run claims a rollout by publishing a record with the next ``claim`` number and reading the
status topic back until its record appears: the first record of that claim in the log wins
(the status topic's records of one key are in one partition, so every reader sees the same
first one). The loser says who won and stops before acting. The winner keeps reading the
journal as it runs; a record of a higher claim, or of its claim by another owner, means another
run took over (it had found this one dead), and it stops at once.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from cutover.control.routes import RouteView, StateReader, Target
from cutover.rollout.journal import RolloutRecord, journal_key


class JournalNotWritten(RuntimeError):
    """The status topic did not take a journal record (the message says why)."""


class ClaimLost(RuntimeError):
    """Another run holds the rollout; ``winner`` is its record."""

    def __init__(self, winner: RolloutRecord) -> None:
        owner = winner.owner
        who = f"pid {owner.pid} on {owner.host}" if owner else "another run"
        super().__init__(f"another run of cutover rollout ({who}) took route {winner.route}'s "
                         f"rollout at the same moment; it drives it now")
        self.winner = winner


def publish_record(t: Target, rec: RolloutRecord, timeout: float = 15.0) -> None:
    producer = Producer(dict(t.conf))
    errors: list[str] = []
    producer.produce(t.status_topic, rec.to_json(), journal_key(rec.route),
                     on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    if producer.flush(timeout) or errors:
        raise JournalNotWritten(f"could not write the rollout journal to {t.status_topic} "
                                f"({errors[0] if errors else 'timeout'}); check the broker and "
                                "retry")


def claim(t: Target, reader: StateReader, rec: RolloutRecord, timeout: float = 30.0) -> RouteView:
    """Publish ``rec`` (the first record of its claim by its owner) and read it back; raise
    :class:`ClaimLost` when another owner's record of the same claim came first. Returns the
    route as read after the claim."""
    reader.refresh()   # everything before the claim is read: the log below is what follows
    publish_record(t, rec)
    seen: list[RolloutRecord] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = reader.refresh()[rec.route]
        seen.extend(view.rollout_log)
        same = [r for r in seen if r.claim == rec.claim]
        if any(r.owner == rec.owner for r in same):
            if same[0].owner != rec.owner:
                raise ClaimLost(same[0])
            return view
        time.sleep(0.1)
    raise JournalNotWritten(f"the rollout journal record did not come back from "
                            f"{t.status_topic} within {timeout:.0f}s; check the broker")


def superseded(rec: RolloutRecord, log: list[RolloutRecord]) -> RolloutRecord | None:
    """The record of another run that took over ``rec``'s rollout, if ``log`` holds one."""
    for other in log:
        if other.claim > rec.claim or (other.claim == rec.claim and other.owner is not None
                                       and other.owner != rec.owner):
            return other
    return None
