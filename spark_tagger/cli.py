"""``cutover tag``: run an unmodified PySpark streaming job with every Kafka output tagged.

    cutover tag --version green [--event-time COLUMN|EXPR] -- job.py [job args...]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex

from cutover.cli.errors import CliError
from cutover.headers import VERSION_PATTERN


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "tag",
        help="run a PySpark streaming job with the tagger (bg.* headers and heartbeats)",
        description="Run JOB.py unmodified as the Spark driver; its writeStream.format('kafka') "
        "output gets bg.version, bg.event_time, bg.watermark and bg.batch headers, and a "
        "heartbeat goes to every partition of the output topic after each micro-batch.",
    )
    p.add_argument("--version", required=True, metavar="V",
                   help="version id stamped on every record ([A-Za-z0-9._-], 1-64 characters)")
    p.add_argument("--event-time", metavar="COLUMN|EXPR", default=None,
                   help="event time of the output records: a column or SQL expression "
                   "(timestamp, window or epoch ms); default: the query's watermark column, "
                   "or a window's end")
    p.add_argument("--kafka-source", choices=("auto", "python", "jvm"), default="auto",
                   help="serve format('kafka') reads with the Python connector: when the JVM "
                   "connector is absent (auto, default), always, or never")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the job's session (repeatable), e.g. "
                   "spark.master=local[2]; added to PYSPARK_SUBMIT_ARGS")
    p.add_argument("--quiet", action="store_true", help="no per-batch line on stderr")
    p.add_argument("job", metavar="JOB.py", help="the PySpark job file, unmodified")
    p.add_argument("job_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments passed to the job (put -- before JOB.py)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not re.fullmatch(VERSION_PATTERN, args.version or ""):
        raise CliError(f"--version {args.version!r} is not a version id: use 1 to 64 of "
                       "A-Z a-z 0-9 . _ - (e.g. blue, green, v2.3.1)")
    if not os.path.isfile(args.job):
        raise CliError(f"job file {args.job!r} does not exist")
    if args.conf:
        os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(
            os.environ.get("PYSPARK_SUBMIT_ARGS"), args.conf)
    from spark_tagger.launcher import TaggerError, run_job
    from spark_tagger.tagger import TagSettings

    settings = TagSettings(version=args.version, event_time=args.event_time,
                           kafka_source=args.kafka_source, quiet=args.quiet)
    job_args = list(args.job_args)
    if job_args[:1] == ["--"]:
        job_args = job_args[1:]
    try:
        return run_job(settings, args.job, job_args)
    except TaggerError as exc:
        raise CliError(f"{exc}") from None


def submit_args(existing: str | None, confs: list[str]) -> str:
    """PYSPARK_SUBMIT_ARGS with ``--conf`` settings added before its final ``pyspark-shell``."""
    for conf in confs:
        key, sep, _ = conf.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--conf {conf!r} is not KEY=VALUE (e.g. --conf spark.master=local[2])")
    words = shlex.split(existing or "")
    if words and words[-1] == "pyspark-shell":
        words = words[:-1]
    for conf in confs:
        words += ["--conf", conf]
    return shlex.join([*words, "pyspark-shell"])
