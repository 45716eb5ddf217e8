"""What the tagger says when it cannot tag a job as written, and how a refusal ends the job.

A refusal on the driver's main thread (at a query's ``start()``) reaches ``cutover tag``, which
prints it as one sentence. A refusal inside a job's ``foreachBatch`` function (a Kafka write the
tagger cannot tag) happens on Spark's callback thread: raised there, it would come back to the
job wrapped in a Java stack trace, after Spark logged it, and the job's other queries would go
on. So it ends the process at once instead, before the write sends anything and before Spark
commits the batch: the same as a kill -9, which every query survives by replaying its
uncommitted batch, byte-identical, when the job is started again with the fix.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

REFUSED_EXIT = 2  # the exit code of every ``cutover`` operator error


class TaggerError(RuntimeError):
    """The job cannot be tagged as written; the message says what to pass or change."""


def end_job(exc: TaggerError, spark: Any) -> None:
    """Print the sentence and end the driver now (see the module docstring for why).

    Spark's own log is silenced first: the JVM would otherwise log the lost callback as the
    query's error, a Java stack trace after the sentence.
    """
    with contextlib.suppress(Exception):
        spark.sparkContext.setLogLevel("OFF")
    print(f"cutover tag: {exc}", file=sys.stderr, flush=True)
    os._exit(REFUSED_EXIT)
