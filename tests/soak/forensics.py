"""When records are lost (or doubled, or from the wrong version): the raw and output partitions
that held them, written beside the workers' logs, so that a failed run can be read record by
record after its cluster is gone."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING

from router.base.kafka_io import base_conf, read_to_end
from tests.soak.workload import Event, parse_value


def _line(offset: int, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> str:
    h = {k: v.decode(errors="replace") for k, v in headers or []}
    try:
        n, by = parse_value(value or b"")
        what = f"n={n}\tby={by}"
    except ValueError:
        what = f"kind={h.get('bg.kind', 'data')}"
    return (f"{offset}\t{what}\tversion={h.get('bg.version', '')}\t"
            f"t={h.get('bg.event_time', '')}\twm={h.get('bg.watermark', '')}\t"
            f"batch={h.get('bg.batch', '')}\tsrc={h.get('bg.src', '')}")


def dump_lost(bootstrap: str, raw: str, output: str, events: dict[int, Event],
              lost: list[int], root: Path, suspects: list[int] | None = None) -> list[Path]:
    """Write ``raw-<p>.tsv`` and ``output-<p>.tsv`` (read_uncommitted and read_committed) for
    each partition holding one of ``lost`` or ``suspects`` (records doubled or from the wrong
    version), and the events' numbers in ``lost.txt`` and ``suspects.txt``; the paths
    written."""
    suspects = suspects or []
    conf = {**base_conf(bootstrap), "log_level": 0}
    written: list[Path] = []
    for p in sorted({events[n].partition for n in lost + suspects if n in events}):
        for topic, name, isolation in ((raw, "raw", "read_committed"),
                                       (output, "output", "read_committed"),
                                       (output, "output-uncommitted", "read_uncommitted")):
            path = root / f"{name}-{p}.tsv"
            with path.open("w") as out:
                for m in read_to_end({**conf, "isolation.level": isolation}, topic,
                                     {p: OFFSET_BEGINNING}, timeout=120):
                    out.write(_line(m.offset(), m.value(), m.headers()) + "\n")
            written.append(path)
    for name, ns in (("lost", lost), ("suspects", suspects)):
        if ns:
            (root / f"{name}.txt").write_text("\n".join(str(n) for n in ns) + "\n")
    return written
