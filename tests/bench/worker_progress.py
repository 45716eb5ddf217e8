"""One router worker (the data path in this process) for the benchmarks that watch workers
from outside: prints a JSON line every 0.2 s with what it owns, has read, held, decided and
forwarded, and its RSS (the held-bound and the two-worker benchmarks).

Usage: worker_progress.py SETTINGS_JSON [WORKER_ID]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from cutover.settings import parse_settings
from router.rule.decision import PartitionCounters
from router.worker.datapath import DataPath


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def decided(c: PartitionCounters) -> int:
    return c.forwarded + c.duplicates + c.dead_lettered + sum(c.suppressed.values())


def main() -> None:
    settings = parse_settings(json.loads(sys.argv[1]))
    engine = DataPath(settings, sys.argv[2] if len(sys.argv) > 2 else "bench-worker")
    print(json.dumps({"ready": True, "rss": rss_bytes()}), flush=True)
    th = threading.Thread(target=engine.run, daemon=True)
    th.start()
    while th.is_alive():
        owned = list(engine.owned.values())
        print(json.dumps({
            "read": sum(sum(o.durability.next_offsets.values()) for o in owned),
            "held": sum(len(o.router.held) for o in owned),
            "paused": sum(o.router.paused for o in owned),
            "forwarded": sum(o.router.counters.forwarded for o in owned),
            "decided": sum(decided(o.router.counters) for o in owned),
            "t": time.monotonic(),
            "partitions": len(owned), "rss": rss_bytes()}), flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
