"""``cutover router``: start a router worker (router.app) and block until it stops."""

from __future__ import annotations

import argparse
from typing import Any

from cutover.cli import CliError
from cutover.settings import SettingsError, load_settings


def _cmd_router(args: argparse.Namespace) -> int:
    import logging

    from router.app import run_worker

    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        raise CliError(f"{exc} (fix the settings file)") from None
    logging.basicConfig(level=getattr(logging, args.loglevel.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_worker(settings, args.loglevel)


def register(sub: Any) -> None:
    p = sub.add_parser("router", help="start a router worker")
    p.add_argument("--config", required=True, help="router settings file (YAML)")
    p.add_argument("--loglevel", default="info")
    p.set_defaults(func=_cmd_router)
