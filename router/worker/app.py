"""The router worker as a Faust application.

Faust runs the worker (signals, logging, the web server for ``/status`` and ``/metrics``) and
owns the data path as a service; the data path itself is a batched confluent-kafka loop in a
thread (see router.worker.datapath for why). Faust's own aiokafka clients are not started: nothing
in the router goes through them, so no guarantee rests on a Faust table changelog.

Faust is ready once its web server runs, before the data path has reached Kafka, so its
"Ready" line is not printed; the worker logs ``router worker W ready`` once its data consumer
has joined the group and taken over its first assignment (docs/decisions/001).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

import faust
from faust.app.base import BootStrategy
from faust.web import Request, Response, View

from cutover.settings import RouterSettings, SettingsError
from router.base.errors import RouterConfigError
from router.base.kafka_io import AccessDenied
from router.worker.allocator import cap_arenas
from router.worker.datapath import DataPath
from router.worker.rebuilds import RebuildsExhausted

log = logging.getLogger("cutover.router")


class _NoKafkaBoot(BootStrategy):
    """Web server, sensors and our services; no Faust consumer/producer (the data path has
    its own confluent-kafka clients)."""

    enable_kafka = False


class RouterApp(faust.App):
    BootStrategy = _NoKafkaBoot


class RouterWorker(faust.Worker):
    """Faust's worker without its "Ready" line, which would come before the data path has
    joined; :meth:`DataPath._note_takeover` says when the worker is ready."""

    def _on_startup_end_spinner(self) -> None:
        if self.spinner:
            self.spinner.finish()


class DataPathService(faust.Service):
    """Runs :class:`DataPath` in a thread; a crash there stops the worker with a message."""

    def __init__(self, engine: DataPath, **kwargs: Any) -> None:
        self.engine = engine
        self.exit_code = 0
        super().__init__(**kwargs)

    @faust.Service.task
    async def _run(self) -> None:
        try:
            await asyncio.to_thread(self.engine.run)
        except (RouterConfigError, SettingsError, AccessDenied) as exc:
            log.error("router cannot start: %s", exc)
            self.exit_code = 2
        except RebuildsExhausted as exc:
            log.error("router stopped: %s", exc)
            self.exit_code = 1
        except Exception as exc:
            log.exception("router data path failed: %s", exc)
            self.exit_code = 1
        if not self.engine.stop_event.is_set():
            # Stopped by its own failure (logged above in one sentence): the worker shuts down
            # as on SIGTERM, and run_worker returns the exit code; no crash report after the
            # sentence.
            self.engine.stop()
            if self.exit_code == 0:
                self.exit_code = 1
            os.kill(os.getpid(), signal.SIGTERM)

    async def on_stop(self) -> None:
        self.engine.stop()


def build_app(settings: RouterSettings, worker_id: str | None = None,
              instance_id: str | None = None) -> tuple[RouterApp, DataPathService]:
    """The Faust app of one worker and the service that runs its data path."""
    engine = DataPath(settings, worker_id, instance_id)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    web = settings.http_port is not None
    app = RouterApp(
        f"cutover-router-{settings.group_id}",
        broker=f"kafka://{settings.bootstrap.split(',')[0]}",
        store="memory://",
        web_enabled=web,
        web_port=settings.http_port or 6066,
        web_bind="0.0.0.0",
        datadir=str(settings.state_dir / "faust"),
    )
    service = DataPathService(engine, loop=None)
    app._extra_services.append(service)  # type: ignore[arg-type]  # an instance, not a class

    @app.page("/status")
    class StatusView(View):
        async def get(self, request: Request) -> Response:
            return self.json({**engine.board.as_json(), "liveness": engine.progress.as_json()})

    @app.page("/metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            return self.text(engine.board.prometheus() + engine.progress.prometheus()
                             + engine.nudger.prometheus() + engine.store_memory.prometheus(),
                             content_type="text/plain; version=0.0.4")

    @app.page("/health")
    class HealthView(View):
        async def get(self, request: Request) -> Response:
            # For liveness probes: 503 while the worker has not joined yet, is stopping, or its
            # watchdog reports it stalled (router.worker.watchdog)
            ok = (engine.ready.is_set() and not engine.stop_event.is_set()
                  and not engine.progress.stalled)
            return self.json({"ready": ok, **engine.progress.as_json()},
                             status=200 if ok else 503)

    del StatusView, MetricsView, HealthView
    return app, service


def run_worker(settings: RouterSettings, loglevel: str = "INFO",
               instance_id: str | None = None) -> int:
    """Start a worker and block until it stops; return the exit code."""
    # before any client's thread: router.worker.allocator
    log.info("C allocator: %s", cap_arenas())
    app, service = build_app(settings, instance_id=instance_id)
    worker = RouterWorker(app, loglevel=loglevel, quiet=True)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        return service.exit_code or code
    return service.exit_code
