"""What librdkafka's on_consume interceptor keeps of consumed records for the compiled path
(router/native/_plugin.h), on records a real broker returned: a record is kept exactly when
``cutover.headers.data_envelope`` recognizes it (save the declines the accessors decide: header
names that are not ASCII, digits too long for 64 bits), and what is kept (version, event time,
timestamp, every header in order) is what the Message's accessors give.

Only librdkafka's consume runs the interceptor (a constructed Message goes through the
accessors, which tests/unit/test_compiled_path.py covers), so this test produces a few hundred
header layouts (the tagger's, and every way to miss it: names, order, values, a repeated or
misplaced envelope header, a null or empty value, digits too long for 64 bits, names that are
not ASCII, an unknown version, none at all), reads them back and compares each record.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.headers import (
    BATCH,
    EVENT_TIME,
    KIND,
    VERSION,
    WATERMARK,
    TaggedRecord,
    data_envelope,
    parse_headers,
)
from router.native import compiled
from testground.brokers import create_topics

pytestmark = pytest.mark.broker

HeaderList = list[tuple[str, bytes | None]]


def _layouts(n: int, seed: int) -> list[HeaderList]:
    rng = random.Random(seed)
    names = [VERSION, EVENT_TIME, WATERMARK, BATCH, KIND, "trace", "x", "é-trace", "bg.Version",
             "bg.event_time ", ""]
    values: list[bytes | None] = [b"blue", b"green", b"violet", b"", None, b"0", b"12",
                                  b"1767225600000", b"1" * 18, b"1" * 19, b"12x", b"-1",
                                  b" 1", "é".encode(), b"\xff\x00"]
    out: list[HeaderList] = []
    base = list(TaggedRecord(version="blue", event_time=1_767_225_600_000,
                             watermark=1_767_225_599_000, batch=3).to_headers())
    for k in range(4):      # every value in every place of the tagger's layout
        for v in values:
            hdrs = list(base)
            hdrs[k] = (hdrs[k][0], v)
            out.append(hdrs)
    for i in range(n):
        t = 1_767_225_600_000 + rng.randrange(10**6)
        tagged: HeaderList = list(TaggedRecord(version=rng.choice(["blue", "green"]),
                                               event_time=t, watermark=t - 1000,
                                               batch=rng.randrange(99)).to_headers())
        job: HeaderList = [(rng.choice(["trace", "x", "é-trace", "span"]),
                            rng.choice(values)) for _ in range(rng.randrange(3))]
        shape = i % 6
        if shape == 0:      # the tagger's layout: job headers, then the envelope
            hdrs = job + tagged
        elif shape == 1:    # one envelope header changed: name, value, or removed
            hdrs = job + tagged
            k = len(job) + rng.randrange(4)
            what = rng.randrange(3)
            if what == 0:
                hdrs[k] = (rng.choice(names), hdrs[k][1])
            elif what == 1:
                hdrs[k] = (hdrs[k][0], rng.choice(values))
            else:
                del hdrs[k]
        elif shape == 2:    # an envelope name among the job's headers too
            hdrs = [(rng.choice([VERSION, EVENT_TIME, WATERMARK, BATCH, KIND]), b"1"), *job,
                    *tagged]
        elif shape == 3:    # the envelope in another order, or headers after it
            hdrs = job + tagged
            if rng.random() < 0.5:
                rng.shuffle(hdrs)
            else:
                hdrs.append(("trace", b"after"))
        elif shape == 4:    # anything
            hdrs = [(rng.choice(names), rng.choice(values)) for _ in range(rng.randrange(7))]
        else:               # a heartbeat, or nothing
            hdrs = [(KIND, b"heartbeat"), *tagged[:1], *tagged[2:]] if rng.random() < 0.5 \
                else []
        out.append(hdrs)
    return out


def test_kept_records_give_what_the_accessors_give(bootstrap: str) -> None:
    assert compiled.enabled(), compiled.path_name()
    assert compiled.PLUGIN is None, compiled.PLUGIN  # on with this client
    assert compiled._fastpath is not None
    for v in ("blue", "green"):  # versions the router has seen (data_envelope knows them)
        parse_headers(TaggedRecord(version=v, event_time=1, watermark=0, batch=0).to_headers())
    topic = f"direct-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 2})
    layouts = _layouts(600, seed=20261125)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    base = int(time.time() * 1000) - 60_000  # recent: older records may go to retention
    for i, hdrs in enumerate(layouts):
        p.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % 2, headers=hdrs or None,
                  timestamp=base + i)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
            "enable.auto.commit": False}
    tap = compiled.client_tap(conf, consumer=True)
    assert tap is not None
    c = Consumer(conf)
    c.assign([TopicPartition(topic, q, 0) for q in range(2)])
    seen = recognized = declined = 0
    try:
        while seen < len(layouts):
            tap.begin()
            for m in c.consume(500, 5):
                assert m.error() is None, m.error()
                kept = compiled._fastpath.envelope(tap, topic, m.partition(), m.offset())
                headers = m.headers()
                want = data_envelope(headers)
                i = int(m.value()[1:])
                if kept is not None:
                    version, event_time, timestamp, kept_headers = kept
                    assert timestamp == m.timestamp()[1]
                    assert kept_headers == headers, (layouts[i], kept_headers)
                    # an unknown version: kept, and not recognized by either
                    got = (version, event_time) if version is not None else None
                    assert got == want, (layouts[i], got, want)
                    recognized += got is not None
                elif want is not None:  # declined: the accessors decide it, only where meant
                    assert any(not name.isascii() for name, _ in headers or ()) \
                        or len(headers[-3][1] or b"") > 18, (layouts[i], want)
                    declined += 1
                seen += 1
        assert tap.counts["dropped"] == 0
    finally:
        c.close()
    # the layouts reach both answers, and the declines (names not ASCII, 19 digits)
    assert recognized > 60 and seen - recognized > 300 and declined > 5, \
        (recognized, seen, declined)
