"""Resume offsets never pass a held, undecided or undelivered record (router.durability.resume)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from router.durability.resume import Ahead, Durability, Ref

RETENTION = 1000


def fresh(out_pos: int = 0, known_end: int = 0) -> Durability:
    return Durability(next_offsets={"a": 0, "b": 0}, out_pos=out_pos, known_end=known_end,
                      rebuild_from=0)


def deliver(d: Durability) -> None:
    """What the output writer and the end of the batch do when every queued record lands."""
    d.start_delivery()
    for i in range(d.queued):
        d.delivered(d.known_end + i)
    assert d.take_delivery()
    d.settle_delivery()
    d.batch_done()


def test_resume_offsets_stop_at_the_lowest_undelivered_output() -> None:
    d = fresh()
    d.next_offsets["a"] = 10
    d.queue_forward("a", 7)
    d.mark_undelivered("a", 4)   # a dead letter
    d.queue_forward("a", 8)
    offsets, readback = d.resume_point([])
    assert offsets == {"a": 4, "b": 0}
    assert readback == 2         # out_pos: two forwards queued after output offset 0


def test_with_atomic_output_the_checkpoint_passes_its_own_batch_but_not_held_records(
        ) -> None:
    """Transactions: the batch's output and checkpoint commit together, so its queued
    forwards and dead letters do not hold the resume offsets back; held records still do, and
    the read-back still starts before the batch's output."""
    d = fresh(out_pos=5, known_end=5)
    d.atomic = True
    d.next_offsets.update(a=10, b=30)
    d.queue_forward("a", 7)
    d.mark_undelivered("a", 4)   # a dead letter
    held = [Ref("b", 12, None, out_pos=3)]
    at = d.next_checkpoint(held, horizon=100, retention_ms=RETENTION)
    assert at.offsets == {"a": 10, "b": 12}
    assert at.readback_from == 3
    d.batch_done()
    assert not d.dirty, "its own checkpoint passed the batch: no second one is needed"


def test_checkpoint_reads_back_from_before_the_batchs_queued_output() -> None:
    d = fresh(out_pos=5, known_end=5)
    d.next_offsets["a"] = 3
    d.queue_forward("a", 2)
    at = d.next_checkpoint([], horizon=100, retention_ms=RETENTION)
    assert (at.seq, at.offsets, at.readback_from) == (1, {"a": 2, "b": 0}, 5)


def test_resume_offsets_stop_at_held_records_and_the_readback_at_their_position() -> None:
    d = fresh(out_pos=9, known_end=9)
    d.next_offsets.update(a=20, b=30)
    held = [Ref("b", 12, None, out_pos=4), Ref("b", 15, None, out_pos=6)]
    offsets, readback = d.resume_point(held)
    assert offsets == {"a": 20, "b": 12}
    assert readback == 4


def test_after_delivery_the_next_checkpoint_passes_the_delivered_records() -> None:
    d = fresh()
    d.next_offsets["a"] = 10
    d.queue_forward("a", 3)
    assert d.next_checkpoint([], 100, RETENTION).offsets["a"] == 3
    deliver(d)
    assert d.dirty   # the records just delivered need one more checkpoint to be passed
    at = d.next_checkpoint([], 100, RETENTION)
    assert (at.seq, at.offsets["a"], at.readback_from) == (2, 10, 1)
    deliver(d)
    assert not d.dirty


def test_another_writers_record_keeps_the_readback_until_its_raw_offset_is_passed() -> None:
    d = fresh(out_pos=10, known_end=10)
    d.next_offsets["a"] = 5
    d.note_foreign(("a", 7), output_offset=3, resume={"a": 5})
    d.note_foreign(("a", 2), output_offset=4, resume={"a": 5})   # already passed: skip only
    assert d.skip == {("a", 7), ("a", 2)}
    assert d.ahead == [Ahead("a", 7, 3)]
    assert d.resume_point([]).readback_from == 3
    d.next_offsets["a"] = 8
    assert d.resume_point([]).readback_from == 10
    assert d.ahead == []


def test_absorbing_drops_covered_outputs_and_moves_the_known_end() -> None:
    d = fresh(out_pos=4, known_end=4)
    for off in range(3):
        d.queue_forward("a", off)
    d.absorbed(end=6, dropped=2)
    assert (d.queued, d.known_end, d.out_pos) == (1, 6, 7)


def test_a_delivery_with_a_gap_is_reported_for_reading_back() -> None:
    d = fresh(out_pos=4, known_end=4)
    d.queue_forward("a", 0)
    d.queue_forward("a", 1)
    d.start_delivery()
    d.delivered(5)   # another writer's record landed at 4
    d.delivered(6)
    assert not d.take_delivery()
    assert d.queued == 0
    d.settle_delivery()
    assert (d.known_end, d.out_pos) == (7, 7)


def test_rebuild_point_follows_the_retention_window_and_never_moves_back() -> None:
    d = fresh()
    assert d.advance_rebuild(None, RETENTION) == 0
    d.out_pos = 10
    assert d.advance_rebuild(500, RETENTION) == 0      # nothing left the window yet
    d.out_pos = 20
    assert d.advance_rebuild(1600, RETENTION) == 10    # horizon 500 < 1600 - 1000
    d.out_pos = 30
    assert d.advance_rebuild(1700, RETENTION) == 10
    assert d.advance_rebuild(1400, RETENTION) == 10    # a smaller horizon: never back
    assert d.advance_rebuild(5000, RETENTION) == 30


# -- the rule as a property: batches of reads, a checkpoint, then delivery ---------------------

Action = tuple[str, str]   # (topic, outcome)
OUTCOMES = ("forward", "dead_letter", "suppress", "hold")


@dataclass
class Model:
    """Which raw records a resume point may pass: decided, not held, output delivered."""

    durability: Durability = field(default_factory=fresh)
    next: dict[str, int] = field(default_factory=lambda: {"a": 0, "b": 0})
    held: list[Ref] = field(default_factory=list)
    unsafe: set[tuple[str, int]] = field(default_factory=set)   # held or output undelivered
    first_undelivered_out: int | None = None

    def read(self, topic: str, outcome: str) -> None:
        d = self.durability
        off = self.next[topic]
        self.next[topic] = off + 1
        d.next_offsets[topic] = off + 1
        d.dirty = True
        if outcome == "hold":
            self.held.append(Ref(topic, off, None, d.out_pos))
            self.unsafe.add((topic, off))
        elif outcome != "suppress":
            self.output(topic, off, forward=outcome == "forward")

    def output(self, topic: str, off: int, forward: bool) -> None:
        d = self.durability
        if forward:
            if self.first_undelivered_out is None:
                self.first_undelivered_out = d.out_pos
            d.queue_forward(topic, off)
        else:
            d.mark_undelivered(topic, off)
        self.unsafe.add((topic, off))

    def release(self) -> None:
        for ref in self.held:
            self.output(ref.topic, ref.offset, forward=True)
        self.held = []

    def checkpoint(self) -> None:
        at = self.durability.next_checkpoint(self.held, None, RETENTION)
        for topic, resume in at.offsets.items():
            assert resume <= self.next[topic]
            passed = {(t, o) for t, o in self.unsafe if t == topic and o < resume}
            assert not passed, f"resume offset {resume} passes {sorted(passed)}"
        lowest = [r.out_pos for r in self.held]
        if self.first_undelivered_out is not None:
            lowest.append(self.first_undelivered_out)
        assert at.readback_from <= min(lowest, default=at.readback_from)

    def deliver(self) -> None:
        deliver(self.durability)
        held = {(r.topic, r.offset) for r in self.held}
        self.unsafe = {u for u in self.unsafe if u in held}
        self.first_undelivered_out = None


batches = st.lists(
    st.tuples(st.lists(st.tuples(st.sampled_from(("a", "b")), st.sampled_from(OUTCOMES)),
                       max_size=12),
              st.booleans()),   # release the held records in this batch
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_resume_point_never_passes_an_unsafe_record(plan: list[tuple[list[Action], bool]]
                                                    ) -> None:
    m = Model()
    for reads, release in plan:
        for topic, outcome in reads:
            m.read(topic, outcome)
        if release:
            m.release()
        m.checkpoint()
        m.deliver()
    m.checkpoint()
