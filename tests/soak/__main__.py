"""``python -m tests.soak [--minutes N] [--seed S]``: the chaos soak, then docs/soak.md.

Exit code 0 when every target passes, 1 when one fails, 2 when the run could not be made.
Ctrl-C (or SIGTERM) stops it; every process it started is stopped either way.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from cutover.topic_admin import BrokerError
from testground.kafka_broker import KafkaCluster, kafka_version
from tests.soak import report
from tests.soak.chaos import ChaosSettings, chaos_run

# The route's dedup retention: five minutes, so that what the stores hold for their window turns
# over six times in a 30-minute run, and memory is judged once a window is full; at the
# default (an hour) a 30-minute run would measure the stores filling, not whether anything
# else grows (tests/soak/rss.py).
SOAK_RETENTION_MS = 5 * 60_000


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 30)))
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--doc", type=Path, default=report.DOC)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else (
        int(os.environ["SOAK_SEED"]) if os.environ.get("SOAK_SEED") else
        random.SystemRandom().randrange(1 << 31))
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background job ignores it
        signal.signal(sig, _interrupt)
    settings = ChaosSettings(seed=seed, minutes=args.minutes, workers=args.workers,
                             retention_ms=SOAK_RETENTION_MS)
    print(f"chaos soak: {args.minutes:g} min of faults, seed {seed}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="cutover-soak-"))
    (root / "kafka").mkdir()
    started = time.monotonic()
    try:
        with KafkaCluster(size=3, root=root / "kafka", broker_defaults=True) as cluster:
            print(f"Apache Kafka {kafka_version()}: {cluster.bootstrap}", flush=True)
            result = chaos_run(cluster, root / "route", settings,
                               lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"soak interrupted after {time.monotonic() - started:.0f} s; every process it "
              f"started is stopped (logs in {root})", file=sys.stderr)
        return 2
    except BrokerError as exc:
        print(f"the soak could not run: {exc}", file=sys.stderr)
        return 2
    finally:  # the brokers' data; their logs and the workers' stay for a look
        for data in (root / "kafka").glob("node-*/data"):
            shutil.rmtree(data, ignore_errors=True)
    (root / "result.json").write_text(result.model_dump_json(indent=1))
    report.write(result, f"Apache Kafka {kafka_version()} (KRaft)", args.doc)
    for t in report.targets(result):
        print(f"{'PASS' if t.passed else 'FAIL'}  {t.name}: {t.measured}")
    for n in result.notes:
        print(f"note: {n}")
    print(f"worker and broker logs, and the results (result.json): {root}")
    return 0 if report.passed(result) else 1


if __name__ == "__main__":
    sys.exit(main())
