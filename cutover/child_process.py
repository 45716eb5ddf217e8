"""Brokers started for the tests and the demo die with the process that started them.

Why: a process that dies by a signal (a segfault, ``kill -9``) runs no teardown, and the Kafka
JVMs (768 MB of heap each) and Tansu brokers it had started kept running until someone killed
them by hand (found once: three JVMs idling for an hour after a test process crashed).
``setpriv --pdeathsig`` (util-linux) asks the kernel to kill the child when the thread that
started it exits; every caller here starts its broker from the main thread, which lives as
long as the broker should. Where ``setpriv`` is not installed (not Linux), the command runs as
it is, and a crashed process leaves its broker behind as before.
"""

from __future__ import annotations

import shutil


def dies_with_parent(cmd: list[str]) -> list[str]:
    """``cmd``, run so that it is killed when the calling thread's process dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return cmd
    return [setpriv, "--pdeathsig", "KILL", "--", *cmd]
