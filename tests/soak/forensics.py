"""When records are lost (or doubled, or from the wrong version): the raw and output partitions
that held them, written beside the workers' logs, so that a failed run can be read record by
record after its cluster is gone; and what the workers said meanwhile: each checkpoint of those
partitions (committed or not: seq, resume offsets, writer and ownership generation), and every
status the workers published (their counters: a replay that found its records in the dedup
store counts them as duplicates; one whose consumer skipped them does not)."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING

from router.base.kafka_io import base_conf, read_to_end
from router.durability.checkpoint import checkpoint_key
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


def dump_state(bootstrap: str, route: str, status: str, checkpoints: str,
               partitions: set[int], root: Path) -> list[Path]:
    """Write ``checkpoints-<p>.tsv`` for each of ``partitions`` (every checkpoint record of
    the partition, read_uncommitted, each marked whether a read_committed reader sees it) and
    ``status.tsv`` (every status record: when, which worker, its counters); the paths
    written."""
    conf = {**base_conf(bootstrap), "log_level": 0}
    written: list[Path] = []
    keys = {checkpoint_key(route, p): p for p in partitions}
    committed: set[tuple[int, int]] = set()
    for m in read_to_end({**conf, "isolation.level": "read_committed"}, checkpoints, timeout=120):
        if m.key() in keys:
            committed.add((m.partition(), m.offset()))
    rows: dict[int, list[str]] = {p: [] for p in partitions}
    for m in read_to_end({**conf, "isolation.level": "read_uncommitted"}, checkpoints,
                         timeout=120):
        p = keys.get(m.key() or b"")
        if p is None:
            continue
        try:
            ck = json.loads(m.value() or b"{}")
        except ValueError:
            continue
        snap = ck.get("snapshot") or {}
        rows[p].append("\t".join(str(x) for x in (
            m.offset(), "committed" if (m.partition(), m.offset()) in committed else "open/aborted",
            ck.get("written_at"), ck.get("seq"), json.dumps(ck.get("offsets")),
            ck.get("readback_from"), ck.get("worker"), ck.get("owner_gen"),
            snap.get("horizon"), snap.get("epoch"))))
    for p, lines in rows.items():
        path = root / f"checkpoints-{p}.tsv"
        path.write_text("offset\tstate\twritten_at\tseq\toffsets\treadback_from\tworker\t"
                        "owner_gen\thorizon\tepoch\n" + "".join(x + "\n" for x in lines))
        written.append(path)
    path = root / "status.tsv"
    with path.open("w") as out:
        out.write("timestamp_ms\tworker\tpartitions\tcounters\n")
        for m in read_to_end({**conf, "isolation.level": "read_committed"}, status, timeout=120):
            try:
                st = json.loads(m.value() or b"{}")
            except ValueError:
                continue
            if not isinstance(st, dict) or "counters" not in st:
                continue
            _, ts = m.timestamp()
            out.write(f"{ts}\t{st.get('worker', '')}\t{sorted(st.get('partitions') or {})}\t"
                      f"{json.dumps(st['counters'], sort_keys=True)}\n")
    written.append(path)
    return written
