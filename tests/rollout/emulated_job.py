"""An emulated tagged job for the rollout tests, run as a process as a real job would be.

It writes what ``cutover tag`` writes for a stateless job: micro-batches of data records (key,
JSON value, ``bg.*`` headers) and then a heartbeat to every partition. Its input is a clock:
event ``i`` arrives ``i / rate`` seconds after ``--origin`` (wall clock, epoch ms) and has
event time ``BASE_T + i * STEP``, so two versions started at different times emit the same
records, and a version started late catches up in a few large batches. After the last of
``--count`` events the watermark closes (jumps an hour past it), as a closing input would. A
checkpoint file (the next event and batch) is written after each batch is acknowledged, so a
kill replays the last batch, byte for byte, as Spark does.

    python tests/rollout/emulated_job.py --bootstrap H:P --topic t.raw --partitions 2 \\
        --version green --origin 1767225600000 --close-file /tmp/close --checkpoint /tmp/ck

``--close-file F``: once F holds a number, the input ends there (the test closes the input
when it has seen what it waited for). ``--change-every N`` changes the value of every Nth
event (a version whose logic differs);
``--stall-file F`` makes the job hang, once, when F appears (it claims F by renaming it), as a
job stuck on an external call; ``--exit-after-batches N`` makes it exit after N batches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from cutover.headers import TaggedRecord, heartbeat_headers

BASE_T = 1_767_225_600_000
STEP = 10            # ms of event time between events
LATENESS = 200       # the watermark trails the largest event time by this much
CLOSED = 3_600_000   # once every event is out, the watermark jumps this far past the last one


def event_time(i: int) -> int:
    return BASE_T + i * STEP


def key(i: int) -> bytes:
    return f"k{i}".encode()


def value(i: int, changed: bool) -> bytes:
    body: dict[str, object] = {"id": i, "t": event_time(i), "amount": i % 97}
    if changed:
        body["amount"] = i % 97 + 1
    return json.dumps(body).encode()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--origin", type=int, required=True, help="wall clock of event 0, epoch ms")
    p.add_argument("--rate", type=float, default=100.0, help="events per second")
    p.add_argument("--count", type=int, default=10**9)
    p.add_argument("--close-file")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--interval", type=float, default=0.3)
    p.add_argument("--max-batch", type=int, default=2000)
    p.add_argument("--change-every", type=int, default=0)
    p.add_argument("--stall-file")
    p.add_argument("--exit-after-batches", type=int, default=0)
    a = p.parse_args()

    ck = Path(a.checkpoint)
    nxt, batch = json.loads(ck.read_text()) if ck.exists() else (0, 0)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    done_batches = 0
    print(f"{a.version}: starting at event {nxt}, batch {batch}", flush=True)
    while True:
        if a.close_file and os.path.exists(a.close_file):
            text = Path(a.close_file).read_text().strip()
            if text:
                a.count = min(a.count, int(text))
        if a.stall_file and os.path.exists(a.stall_file):
            try:
                os.rename(a.stall_file, a.stall_file + ".taken")
            except OSError:
                pass
            else:
                print(f"{a.version}: stalled (as on a stuck external call)", flush=True)
                while True:
                    time.sleep(3600)
        arrived = int((time.time() * 1000 - a.origin) / 1000 * a.rate)
        upto = min(arrived, a.count, nxt + a.max_batch)
        watermark = event_time(nxt - 1) - LATENESS if nxt > 0 else None
        for i in range(nxt, upto):
            changed = a.change_every > 0 and i % a.change_every == 0
            headers = TaggedRecord(version=a.version, event_time=event_time(i),
                                   watermark=watermark, batch=batch).to_headers()
            producer.produce(a.topic, value(i, changed), key(i), partition=i % a.partitions,
                             headers=headers)
        after = event_time(upto - 1) - LATENESS if upto > 0 else None
        if upto == a.count and a.count > 0:
            after = event_time(a.count - 1) + CLOSED   # the input is closed: nothing more
        for part in range(a.partitions):
            producer.produce(a.topic, b"", None, partition=part,
                             headers=heartbeat_headers(a.version, after, batch))
        if producer.flush(30):
            print(f"{a.version}: a batch was not acknowledged", file=sys.stderr, flush=True)
            return 1
        nxt, batch = upto, batch + 1
        tmp = ck.with_suffix(".tmp")
        tmp.write_text(json.dumps([nxt, batch]))
        tmp.replace(ck)
        done_batches += 1
        if a.exit_after_batches and done_batches >= a.exit_after_batches:
            print(f"{a.version}: exiting after {done_batches} batches", flush=True)
            return 3
        time.sleep(a.interval)


if __name__ == "__main__":
    raise SystemExit(main())
