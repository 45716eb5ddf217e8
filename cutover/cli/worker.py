"""``cutover router``: start a router worker (router.worker.app) and block until it stops."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from cutover.cli.errors import CliError
from cutover.cli.settings_file import settings_file

INSTANCE_ENV = "CUTOVER_INSTANCE_ID"
INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _cmd_router(args: argparse.Namespace) -> int:
    import logging

    from router.worker.app import run_worker

    settings = settings_file(args.config)
    logging.basicConfig(level=getattr(logging, args.loglevel.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    instance = args.instance_id or os.environ.get(INSTANCE_ENV) or None
    if instance is not None and not INSTANCE_ID.fullmatch(instance):
        raise CliError(f"instance id {instance!r} is not valid: use 1-200 of A-Z a-z 0-9 . _ - "
                       "(for example the pod name of a StatefulSet)")
    return run_worker(settings, args.loglevel, instance)


def register(sub: Any) -> None:
    p = sub.add_parser("router", help="start a router worker")
    p.add_argument("--config", required=True, help="router settings file (YAML)")
    p.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"],
                   help="how much the worker logs")
    p.add_argument("--instance-id", default=None,
                   help="this worker's stable id in the consumer group (static membership): "
                        "restarted with the same id it takes its partitions back at once; "
                        f"default ${INSTANCE_ENV}, else none (a restart then waits out the "
                        "session timeout)")
    p.set_defaults(func=_cmd_router)
