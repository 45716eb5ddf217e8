"""Worker memory over the run: is it flat?

Per worker process: its resident memory at its first sample (start), at its reference point
and at its end. The reference is the first sample once the first fault is over, the process
has run a minute (start-up caches filled), it has owned its partitions for a minute (a takeover
is a start for the partitions it takes: their read-back, their stores' memtables and the
client's buffers for them form then, so memory held for more partitions is not growth) and the
run is one dedup retention window old (what a store holds for the window is there: a process
started later rebuilt or kept its stores for the whole window). The end is the lowest sample
of its last ``END_WINDOW_S``: memory it holds, not a recovery's passing peak (a worker that has
just rebuilt its stores from the output log, as a resumed zombie does, allocates for it and
gives the free pages back within its trim period, router.worker.allocator; a leak raises the
lowest sample too). Its very last sample is kept beside (``last_mb``). A process is judged when
at least ``min_span_s`` separate its reference and its end; the target holds when every judged
process ends within 15% of its reference, and some process was judged.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from tests.soak.router_workers import RssSample, Worker

RSS_TOLERANCE = 0.15
WARM_S = 60.0
END_WINDOW_S = 90.0   # three of the worker's free-memory trim periods


class WorkerRss(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str
    pid: int
    start_mb: float
    reference_mb: float | None
    end_mb: float           # the lowest sample of the last END_WINDOW_S
    last_mb: float | None = None   # the very last sample
    # the stores' block cache and memtables at the reference and at the end (/metrics)
    reference_stores_mb: float | None = None
    end_stores_mb: float | None = None
    reference_threads: int | None = None
    end_threads: int | None = None
    # the raw partitions it owned at the reference and at the end
    reference_partitions: int | None = None
    end_partitions: int | None = None
    span_s: float           # from the reference sample to the last one
    judged: bool

    @property
    def flat(self) -> bool:
        return self.reference_mb is not None and \
            abs(self.end_mb - self.reference_mb) <= RSS_TOLERANCE * self.reference_mb


def last_takeover(samples: list[RssSample]) -> float:
    """When the process last took partitions over: the last sample owning more raw partitions
    than the sample before it (0 when it never reported any)."""
    at, owned = 0.0, 0
    for x in samples:
        if x.partitions is None:
            continue
        if x.partitions > owned:
            at = x.at
        owned = x.partitions
    return at


def rss_summary(workers: Iterable[Worker], first_fault_end: float,
                min_span_s: float, window_full_at: float = 0.0) -> list[WorkerRss]:
    """``window_full_at``: when the run's stores first hold a whole retention window."""
    out: list[WorkerRss] = []
    for w in workers:
        by_pid: dict[int, list[RssSample]] = {}
        for sample in w.rss:
            by_pid.setdefault(sample.pid, []).append(sample)
        for pid, samples in by_pid.items():
            first, last = samples[0], samples[-1]
            end = min((x for x in samples if x.at >= last.at - END_WINDOW_S),
                      key=lambda x: x.rss_mb)
            settled = max(first_fault_end, first.at + WARM_S, window_full_at,
                          last_takeover(samples) + WARM_S)
            ref = next((x for x in samples if x.at >= settled), None)
            span = last.at - ref.at if ref is not None else 0.0
            out.append(WorkerRss(instance_id=w.instance_id, pid=pid, start_mb=first.rss_mb,
                                 reference_mb=ref.rss_mb if ref is not None else None,
                                 end_mb=end.rss_mb, last_mb=last.rss_mb,
                                 span_s=round(span, 1),
                                 reference_stores_mb=ref.stores_mb if ref is not None else None,
                                 end_stores_mb=last.stores_mb,
                                 reference_threads=ref.threads if ref is not None else None,
                                 end_threads=last.threads,
                                 reference_partitions=ref.partitions if ref is not None else None,
                                 end_partitions=last.partitions,
                                 judged=ref is not None and span >= min_span_s))
    return out


def rss_flat(rows: list[WorkerRss]) -> bool | None:
    """True/False when some process was judged; None when none lived long enough."""
    judged = [r for r in rows if r.judged]
    return all(r.flat for r in judged) if judged else None
