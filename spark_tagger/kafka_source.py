"""A pure-Python Kafka source and sink for Spark 4 (``format("cutover_kafka")``).

It rests on Spark 4's Python data source API, which Spark 3.5 lacks: there the job's Kafka
reads need Spark's own connector (:mod:`.spark_version`).

For places where the JVM connector cannot be added (no Maven, no jars): the options, the schema
and the offset format are those of Spark's own Kafka connector, offsets live in Spark's
checkpoint (the source commits nothing to Kafka), and ``maxOffsetsPerTrigger`` and
``Trigger.AvailableNow`` work. Reads come back as Arrow batches; writes go through librdkafka.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_tagger.kafka_client import (
    EndOffsetProbe,
    matching_topics,
)
from spark_tagger.options import SinkOptions, SourceOptions, consumer_config
from spark_tagger.produce import ProduceStats, produce_batches
from spark_tagger.range_reader import EARLIEST, KafkaRange, read_range
from spark_tagger.sink_schema import check_sink_schema

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "cutover_kafka"

BASE_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)
HEADERS_FIELD = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"

Offsets = dict[str, dict[str, int]]
LATEST = -1


def source_schema(include_headers: bool) -> str:
    """Spark's Kafka source schema; ``headers`` only with ``includeHeaders=true``, as in Spark."""
    return f"{BASE_SCHEMA}, {HEADERS_FIELD}" if include_headers else BASE_SCHEMA


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one write task produced, summed on the driver."""

    records: int
    per_partition: dict[str, int]


class CutoverKafka(DataSource):
    """``spark.readStream.format("cutover_kafka")`` / ``df.writeStream.format("cutover_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return source_schema(include)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.from_options(self.options, streaming=True), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(SourceOptions.from_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return KafkaStreamWriter(SinkOptions.from_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return KafkaBatchWriter(SinkOptions.from_options(self.options), schema)


# ----------------------------------------------------------------------------- reading


class _OffsetPlanner:
    """Driver-side knowledge of the topics: partitions, earliest and end offsets."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._probe: EndOffsetProbe | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_probe": None}  # a live client is not picklable

    @property
    def probe(self) -> EndOffsetProbe:
        if self._probe is None:
            self._probe = EndOffsetProbe(consumer_config(self.opts.client, False))
        return self._probe

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def partitions(self) -> list[tuple[str, int]]:
        consumer = self.probe.consumer
        if self.opts.assign is not None:
            return sorted((t, p) for t, ps in self.opts.assign.items() for p in ps)
        topics = (list(self.opts.subscribe) if self.opts.subscribe
                  else matching_topics(consumer, self.opts.subscribe_pattern or ""))
        out: list[tuple[str, int]] = []
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10.0).topics.get(topic)
            if meta is None or meta.error is not None:
                continue  # as Spark: a subscribed topic that does not exist yet has no partitions
            out.extend((topic, p) for p in meta.partitions)
        return sorted(out)

    def resolve(self, spec: Any, parts: list[tuple[str, int]]) -> Offsets:
        """Turn ``earliest``/``latest``/JSON into concrete offsets for every partition."""
        if spec == "latest":
            ends = self.probe.ends(parts)
            return _nest({tp: ends[tp] for tp in parts})
        if spec == "earliest":
            begins, _ = self.probe.begins_and_ends(parts)
            return _nest({tp: begins[tp] for tp in parts})
        chosen: dict[tuple[str, int], int] = {}
        for topic, by_part in spec.items():
            for p, off in by_part.items():
                chosen[(topic, int(p))] = off
        unknown = [f"{t}:{p}" for t, p in chosen if (t, p) not in parts]
        if unknown:
            raise ValueError(f"offsets are given for partitions that are not read: {unknown}")
        missing = [f"{t}:{p}" for t, p in parts if (t, p) not in chosen]
        if missing:
            raise ValueError(f"startingOffsets JSON gives no offset for partitions {missing}")
        need_begin = [tp for tp, o in chosen.items() if o == EARLIEST]
        need_end = [tp for tp, o in chosen.items() if o == LATEST]
        if need_begin:
            begins, _ = self.probe.begins_and_ends(need_begin)
            chosen.update({tp: begins[tp] for tp in need_begin})
        if need_end:
            ends = self.probe.ends(need_end)
            chosen.update({tp: ends[tp] for tp in need_end})
        return _nest(chosen)


def _nest(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, p), off in sorted(flat.items()):
        out.setdefault(topic, {})[str(p)] = off
    return out


def _flat(nested: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in nested.items() for p, o in parts.items()}


def rate_limit(start: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """Spark's ``maxOffsetsPerTrigger``: share ``max_rows`` across partitions by backlog."""
    s, e = _flat(start), _flat(end)
    sizes = {tp: max(0, off - s.get(tp, 0)) for tp, off in e.items()}
    total = sum(sizes.values())
    if total <= max_rows:
        return end
    out: dict[tuple[str, int], int] = {}
    for tp, off in e.items():
        begin = s.get(tp, 0)
        prorate = max_rows * (sizes[tp] / total)
        # as Spark: do not starve small partitions completely
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(off, begin + step)
    return _nest(out)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets in Spark's checkpoint, ranges read on executors."""

    MIN_PROBE_INTERVAL_S = 0.1  # Spark polls an idle source every 10 ms; a fetch per poll is enough

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._planner = _OffsetPlanner(opts)
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._last_probe = 0.0

    def initialOffset(self) -> Offsets:
        return self._planner.resolve(self.opts.starting_offsets, self._planner.partitions())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest_all()

    def _latest_all(self) -> Offsets:
        wait = self.MIN_PROBE_INTERVAL_S - (time.monotonic() - self._last_probe)
        if wait > 0:
            time.sleep(wait)
        self._last_probe = time.monotonic()
        parts = self._planner.partitions()
        ends = self._planner.probe.ends(parts)
        self._latest = _nest(ends)
        return self._latest

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = _flat(self._target if self._target is not None else self._latest_all())
        begin = _flat(start)
        # never go backwards (a partition probed before a lagging fetch answer)
        merged = {tp: max(off, begin.get(tp, off)) for tp, off in latest.items()}
        for tp, off in begin.items():
            merged.setdefault(tp, off)
        end = _nest(merged)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets | None:
        return self._latest

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return plan_ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        return read_range(self.opts, self.schema, partition)

    def commit(self, end: Offsets) -> None:
        """Offsets are in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        self._planner.close()


def plan_ranges(start: Offsets, end: Offsets) -> list[KafkaRange]:
    s, e = _flat(start), _flat(end)
    ranges = []
    for (topic, p), stop in sorted(e.items()):
        begin = s.get((topic, p), EARLIEST)  # a partition added since the last batch
        if begin == EARLIEST or stop > begin:
            ranges.append(KafkaRange(topic, p, begin, stop))
    return ranges


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("cutover_kafka")``: startingOffsets..endingOffsets, once."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        planner = _OffsetPlanner(opts)
        try:
            parts = planner.partitions()
            self._start = planner.resolve(opts.starting_offsets, parts)
            self._end = planner.resolve(opts.ending_offsets, parts)
        finally:
            planner.close()

    def partitions(self) -> Sequence[InputPartition]:
        return plan_ranges(self._start, self._end) or [KafkaRange("", -1, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        if partition.partition < 0:
            return iter(())
        return read_range(self.opts, self.schema, partition)


# ----------------------------------------------------------------------------- writing


class _ProducingWriter:
    """What the streaming and the batch sink share: schema check, then produce every row."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        check_sink_schema(schema, opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        stats = produce_batches(iterator, self.opts)
        return WriteCommit(stats.records, stats.per_partition)


class KafkaStreamWriter(_ProducingWriter, DataSourceStreamArrowWriter):
    """Streaming sink: each task produces its rows and flushes before reporting success."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task flushed already; the batch is done when all of them succeeded."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records of failed tasks may be in Kafka already: at-least-once, Spark replays."""


class KafkaBatchWriter(_ProducingWriter, DataSourceArrowWriter):
    """``df.write.format("cutover_kafka")``."""


__all__ = ["NAME", "CutoverKafka", "ProduceStats", "rate_limit", "source_schema"]
