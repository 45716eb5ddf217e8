"""``cutover demo``: the whole story on an embedded broker, with real parts.

A generated order stream feeds an unmodified PySpark job (windowed totals per customer) under
the tagger; a router worker sits between the jobs and the output topic. Blue runs alone for a
while; then ``cutover rollout --canary 10%,100%`` deploys green, blue with one bug fixed
(orders above the single-order limit are held for review and no longer counted), by key share:
first green gets 10% of the customers, and the comparison of both outputs for those customers
finds the few windows the fix changes, shows them, and lets the rollout go on within
``--max-diff 10%``; then green gets every key, the rollout waits for CLEAR_TO_TEARDOWN, stops
blue and soaks.
Then a second ``cutover rollout`` deploys v3, a deliberately broken version: the demo makes it
hang right after the switch (as a job stuck on an external call), the deadline passes, and the
rollout rolls back to green by itself. The output is checked against a reference computed from
the input alone: nothing lost, nothing doubled, each window from the version its event time
belongs to, counted as that version counts it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cutover.cli.plan as plan_command
import cutover.cli.rollout as rollout_command
from cutover.cli.demo_parts import (
    PARTITIONS,
    ROUTE,
    OrderFeed,
    Processes,
    Route,
    say,
    write_settings,
)
from cutover.cli.demo_report import Story, summarize
from cutover.cli.dispatch import run_command
from cutover.cli.errors import CliError
from cutover.cli.parsing import CutoverParser
from cutover.demo_broker import EmbeddedBroker
from cutover.rollout.journal import Phase
from cutover.topic_admin import create_topics, wait_until_ready


def _jobs() -> Path:
    """The example jobs the demo runs: examples/jobs, shipped in an installed wheel as
    cutover/demo_jobs (setup.py); in a source checkout, the directory itself."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "demo_jobs"
    return packaged if packaged.is_dir() else here.parents[2] / "examples" / "jobs"


JOBS = _jobs()
# Small-machine Spark settings: the default 200 shuffle partitions make each micro-batch of a
# stateful job take ~45 s on two cores; two partitions take well under a second.
SPARK_CONF = [f"--conf={kv}" for kv in (
    "spark.master=local[2]", "spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
    "spark.ui.showConsoleProgress=false", "spark.sql.session.timeZone=UTC")]
STEADY_S = 20.0   # blue alone, then green alone: the output's rhythm when nothing changes
# Green's fix: orders above this amount are held for review, not counted. About 0.5% of the
# orders, so about 2% of the windows (3 to 4 orders each at the demo's rate) differ.
REVIEW_LIMIT = 248.75
_ANCHOR = '              .select("o.*")\n'


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole story on an embedded broker (about 6 minutes)")
    p.add_argument("--bootstrap", help="use this Kafka instead of starting an embedded broker")
    p.add_argument("--out", default="var/demo", help="where the timeline and logs go")
    p.add_argument("--rate", type=int, default=40, help="input orders per second")
    p.add_argument("--run-on", type=float, default=15.0,
                   help="seconds to keep running after the last rollout")
    p.set_defaults(func=run)


def cutover(*args: str) -> int:
    """Run an operator command as a user would type it: its own parser, its error sentences and
    exit codes (the commands the story runs: ``plan`` and ``rollout``)."""
    parser = CutoverParser(prog="cutover")
    commands = parser.add_subparsers(dest="command", parser_class=CutoverParser)
    plan_command.register(commands)
    rollout_command.register(commands)
    return run_command(parser.parse_args(list(args)))


class Demo:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args, self.out = args, out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="cutover-demo-"))
        self.procs = Processes(self.logs)
        self.exe = str(Path(sys.executable).parent / "cutover")
        self.bootstrap = ""
        self.cfg: list[str] = []
        self.route: Route | None = None
        self.story = Story()

    def job(self, version: str, script: str | Path, *extra: str) -> list[str]:
        return [self.exe, "tag", "--version", version, "--quiet", *SPARK_CONF, "--",
                str(JOBS / script), "--bootstrap", self.bootstrap, "--input", "demo.orders",
                "--output", "demo.totals.raw", "--checkpoint", str(self.work / f"ck-{version}"),
                *extra]

    def green_job(self) -> Path:
        """Blue's job with the fix, as a developer would write it: one line more."""
        source = (JOBS / "windowed_totals.py").read_text()
        if source.count(_ANCHOR) != 1:
            raise CliError("examples/jobs/windowed_totals.py changed: the demo cannot add "
                           "green's fix after its `.select(\"o.*\")` line", 1)
        fixed = source.replace(_ANCHOR, _ANCHOR + (
            "              # green: orders above the single-order limit are held for review\n"
            f"              .where(F.col(\"amount\") <= F.lit({REVIEW_LIMIT}))\n"), 1)
        path = self.work / "windowed_totals_fixed.py"
        path.write_text(fixed)
        return path

    def rollout(self, *args: str) -> int:
        say("$ cutover rollout --route totals " + " ".join(
            shlex.quote(a) if len(a) < 60 else "'...'" for a in args))
        rc = cutover("rollout", "--route", ROUTE, "--log-dir", str(self.logs / "rollout"),
                     *args, *self.cfg)
        if rc == 130:
            raise KeyboardInterrupt
        return rc

    def story_so_far(self, route: Route, feed: OrderFeed) -> None:
        # -- blue alone ---------------------------------------------------------------------
        blue = self.procs.start("blue", self.job("blue", "windowed_totals.py"))
        say("blue (windowed_totals.py) started under the tagger")
        route.wait(self.procs, lambda: route.min_watermarks(("blue",))["blue"] is not None,
                   "blue's first output", timeout=180)
        say(f"blue runs alone for {STEADY_S:.0f} s")
        self.story.steady.append((time.time(), time.time() + STEADY_S))
        time.sleep(STEADY_S)

        # -- rollout 1: green, 10% of the keys first, compared, then every key ---------------
        say(f"green is blue with a bug fixed: orders above {REVIEW_LIMIT} are held for review "
            "and no longer counted; green gets 10% of the customers first, and the comparison "
            "of those customers' windows should find the few that had one")
        started = time.time()
        rc = self.rollout("--to", "green", "--start", shlex.join(self.job(
            "green", self.green_job())), "--stop-old", f"kill -TERM -{blue}",
            "--catch-up-lag", "60s", "--canary", "10%,100%", "--canary-for", "20s",
            # two of the twelve customers fall in the canary's 10% of the key buckets: about
            # sixty windows, a few of them with an order above the review limit
            "--compare", "--compare-for", "30s", "--max-diff", "10%",
            "--deadline", "5m", "--soak", "15s")
        self.story.rollouts.append((started, time.time()))
        if rc != 0:   # blue still runs: stopped with everything else the demo started
            raise CliError("the rollout to green did not finish (see above)", 1)
        self.procs.forget("blue")   # the rollout stopped it (--stop-old)
        route.view()
        green = route.rollouts[-1]
        assert green.new_process is not None
        self.story.first_bounds = {p: ps.boundary for p, (ps, *_) in
                                   route.view().partitions.items() if ps.boundary is not None}
        say(f"green runs alone for {STEADY_S:.0f} s")
        self.story.steady.append((time.time(), time.time() + STEADY_S))
        time.sleep(STEADY_S)

        # -- rollout 2: v3, which gets stuck after the switch --------------------------------
        stuck = self.work / "v3-stuck"
        watcher = threading.Thread(target=self.stall_after_switch, args=(stuck,), daemon=True)
        watcher.start()
        started = time.time()
        rc = self.rollout("--to", "v3", "--start", shlex.join(self.job(
            "v3", "windowed_totals_stuck.py", "--stall-file", str(stuck))),
            "--stop-old", f"kill -TERM -{green.new_process.pid}", "--catch-up-lag", "60s",
            # The boundary two minutes of event time ahead (~10 s here): v3 hangs before its
            # watermark reaches it. With the default 10 s (~1 s here) v3 could pass the
            # boundary, and green be cleared, before the hang was set off.
            "--margin", "120s", "--deadline", "150s", "--soak", "5s")
        self.story.rollouts.append((started, time.time()))
        if rc != 1:
            raise CliError(f"the rollout to v3 was meant to roll back, it exited {rc}", 1)
        say(f"running on green for {self.args.run_on:.0f} s")
        self.story.steady.append((time.time(), time.time() + self.args.run_on))
        time.sleep(self.args.run_on)
        feed.stop_event.set()
        feed.join(10)

    def stall_after_switch(self, stuck: Path) -> None:
        """Make v3 hang once the rollout has switched to it."""
        route = Route(self.work / "router.yaml")
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                route.view()
                if any(r.spec.new == "v3" and r.phase is Phase.DRAINING for r in route.rollouts):
                    stuck.touch()
                    say("v3 is now primary for new event times; the demo makes it hang, as a "
                        "job stuck on a call to a service that never answers")
                    return
                time.sleep(0.25)
        finally:
            route.close()

    def run(self) -> int:
        broker: EmbeddedBroker | None = None
        feed: OrderFeed | None = None
        route: Route | None = None
        started = time.monotonic()
        try:
            if self.args.bootstrap:
                self.bootstrap = self.args.bootstrap
                wait_until_ready(self.bootstrap)
                say(f"using Kafka at {self.bootstrap}")
            else:
                broker = EmbeddedBroker(log_path=self.logs / "broker.log").start()
                self.bootstrap = broker.bootstrap
                say(f"embedded broker up at {self.bootstrap}")
            create_topics(self.bootstrap, {
                "demo.orders": PARTITIONS, "demo.totals.raw": PARTITIONS,
                "demo.totals": PARTITIONS, "demo.totals.dlq": PARTITIONS, "demo.control": 1,
                "demo.status": 1}, compacted=["demo.control"])
            config = write_settings(self.work / "router.yaml", self.bootstrap)
            self.cfg = ["--config", str(config)]
            os.environ.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable})
            feed = OrderFeed(self.bootstrap, "demo.orders", self.args.rate)
            feed.start()
            say(f"order feed: {self.args.rate} orders/s, event time 10 s per wall second")
            self.procs.start("router", [self.exe, "router", *self.cfg, "--loglevel", "warning"])
            if cutover("plan", "init", "--route", ROUTE, "--primary", "blue", *self.cfg) != 0:
                raise CliError("could not publish the first plan", 1)
            route = Route(config)
            self.story_so_far(route, feed)
            route.settle()
            route.stop_started_versions()
            report = summarize(self.bootstrap, route.view(), route.rollouts, feed.written(),
                               self.story, self.out, REVIEW_LIMIT)
            self.procs.stop("router")
            say(f"done in {time.monotonic() - started:.0f} s")
            return 0 if report["lost"] == 0 and report["duplicated"] == 0 else 1
        except KeyboardInterrupt:
            say("interrupted: stopping everything the demo started")
            return 130
        finally:
            if feed is not None:
                feed.stop_event.set()
            if route is not None:
                route.view()
                route.stop_started_versions()
                route.close()
            self.procs.stop_all()
            if broker is not None:
                broker.stop()


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return Demo(args, out).run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt
