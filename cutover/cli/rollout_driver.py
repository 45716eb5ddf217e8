"""The loop that runs a rollout: observe, let the phase machine decide, journal, act.

Each round reads the route's state and the journal from the status and control topics (one
reader, kept open), watches the new version's process, and feeds what it saw to
:func:`cutover.rollout.machine.step`. A record that changed is journaled before its actions
run, so a crash between the two repeats the action, never skips it. The record is also
re-published every few seconds by a thread of its own (the loop may be busy running a stop
command), which keeps the rollout visible to ``cutover status`` and its owner alive to other
runs. A comparison runs in a thread for its window; everything else runs
in the loop.
"""

from __future__ import annotations

import getpass
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cutover.cli.rollout_procs import Commands
from cutover.cli.rollout_view import LiveView
from cutover.control.compare_reader import CompareStopped, compare_route
from cutover.control.next_plan import At, next_canary_plan, next_plan
from cutover.control.next_plan import SwitchRefused as NextPlanRefused
from cutover.control.rollout_claim import JournalNotWritten, publish_record, superseded
from cutover.control.routes import PlanNotPublished, RouteView, StateReader, Target, publish_plan
from cutover.key_primary import Canary
from cutover.plan import CutoverPlan, PlanRejected, utcnow
from cutover.rollout.events import (
    AbortRequested,
    Action,
    CompareDone,
    CompareFailed,
    Event,
    NewRestarted,
    NewStarted,
    NewStopped,
    Observation,
    OldStopped,
    PartitionFacts,
    PublishRollback,
    PublishSwitch,
    Requested,
    RestartNew,
    RollbackPublished,
    RouteFacts,
    StartCompare,
    StartFailed,
    StartNew,
    StopNew,
    StopOld,
    SwitchPublished,
    SwitchRefused,
    Tick,
)
from cutover.rollout.journal import CompareSummary, Owner, RolloutRecord, percent
from cutover.rollout.machine import step
from cutover.rollout.metrics import prometheus
from cutover.rollout.notify import EventSink
from cutover.settings import RouterSettings
from router.base.kafka_io import BrokerUnavailable
from router.durability.output_tally import OutputTally

HEARTBEAT_S = 5.0


class Superseded(RuntimeError):
    """Another run took the rollout over; this one must stop acting."""


class Driver:
    def __init__(self, t: Target, settings: RouterSettings | None, reader: StateReader,
                 owner: Owner, view: LiveView, *, interval: float = 1.0,
                 metrics_port: int | None = None, sink: EventSink | None = None) -> None:
        self.t, self.settings, self.reader = t, settings, reader
        self.sink = sink
        self.owner, self.view, self.interval = owner, view, interval
        self.commands: Commands | None = None
        self.stop = threading.Event()
        self.route_view: RouteView | None = None
        self.rec: RolloutRecord | None = None
        self._compare: threading.Thread | None = None
        self._compared: CompareSummary | str | None = None
        self._published_at = 0.0
        self._journal = threading.Lock()   # one writer of the journal at a time, in order
        self._beats: threading.Thread | None = None
        self._tally: OutputTally | None = None
        self._metrics = _serve_metrics(self, metrics_port) if metrics_port is not None else None

    # -- the loop ---------------------------------------------------------------------------

    def run(self, rec: RolloutRecord, first: Event | None = None) -> RolloutRecord:
        """Drive ``rec`` (already claimed) to a terminal phase; return the last record."""
        self.rec = rec
        self.commands = Commands(Path(rec.spec.log_dir))
        self._open_tally(rec)
        self._beats = threading.Thread(target=self._heartbeats, name="journal", daemon=True)
        self._beats.start()
        try:
            if first is not None:
                rec = self._handle(rec, first, utcnow())
            while not rec.phase.terminal:
                view = self._refresh()
                other = superseded(rec, view.rollout_log)
                if other is not None:
                    who = (f"pid {other.owner.pid} on {other.owner.host}" if other.owner
                           else "another run")
                    raise Superseded(f"{who} took this rollout over; this run stops without "
                                     "acting")
                read = rec
                for r in view.rollout_log:
                    if r.abort_requested and r.claim == rec.claim and rec.rollback is None:
                        rec = self._handle(rec, AbortRequested(r.abort_requested), utcnow())
                        break
                for r in view.rollout_log:   # promote, pause, resume: from any host
                    if r.request is not None and r.claim == rec.claim:
                        rec = self._handle(rec, Requested(r.request.kind, r.request.by),
                                           utcnow())
                rec = self._handle(rec, self._compare_event(), utcnow())
                if rec is not read:  # an abort or a comparison's end may have published a
                    view = self._refresh()  # plan: the tick looks at the state after it
                obs = self._observe(view, rec)
                rec = self._handle(rec, Tick(obs), obs.now)
                self.view.update(rec, obs, self._forwarded())
                if not rec.phase.terminal:
                    self.stop.wait(self.interval)
            return rec
        finally:
            self.stop.set()
            if self._beats is not None:
                self._beats.join(20)
            if self._tally is not None:
                self._tally.close()
            if self._metrics is not None:
                self._metrics.shutdown()
            if self.sink is not None:
                self.sink.close()

    def let_go(self, note: str) -> None:
        """Leave the rollout where it is, marked as driven by nobody (Ctrl-C)."""
        self.stop.set()
        if self._beats is not None:
            self._beats.join(20)
        if self.rec is not None and not self.rec.phase.terminal:
            self._publish(self.rec.model_copy(update={"owner": None, "note": note}))

    def _handle(self, rec: RolloutRecord, event: Event | None, now: datetime) -> RolloutRecord:
        queue: list[Event] = [event] if event is not None else []
        while queue:
            ev = queue.pop(0)
            result = step(rec, ev, now)
            if result.record != rec:
                self.view.changed(rec, result.record, now)
                if self.sink is not None:
                    self.sink.changed(rec, result.record, now)
                rec = self._publish(result.record)
            for action in result.actions:
                queue.extend(self._act(action, rec))
        return rec

    def _publish(self, rec: RolloutRecord) -> RolloutRecord:
        with self._journal:
            rec = rec.model_copy(update={"updated_at": utcnow(), "request": None})
            publish_record(self.t, rec)
            self._published_at = time.monotonic()
            self.rec = rec
        return rec

    def _heartbeats(self) -> None:
        """Re-publish the record while the loop is busy or idle (a stop command, a restart):
        the rollout stays visible and its owner alive to other runs."""
        while not self.stop.wait(1.0):
            with self._journal:
                rec = self.rec
                if rec is None or rec.phase.terminal \
                        or time.monotonic() - self._published_at < HEARTBEAT_S:
                    continue
                try:
                    publish_record(self.t, rec.model_copy(update={"updated_at": utcnow()}))
                except JournalNotWritten:
                    continue   # the loop's next write says so
                self._published_at = time.monotonic()

    # -- observing --------------------------------------------------------------------------

    def _refresh(self) -> RouteView:
        assert self.rec is not None
        view = self.reader.refresh()[self.rec.route]
        self.route_view = view
        return view

    def _observe(self, view: RouteView, rec: RolloutRecord) -> Observation:
        assert self.commands is not None
        parts = {p: PartitionFacts(epoch=e, boundary=ps.boundary, horizon=ps.horizon,
                                   watermarks=dict(ps.watermarks), pinned=ps.pinned,
                                   held=ps.held)
                 for p, (ps, e, _w, _u) in view.partitions.items()}
        n = view.num_partitions or (max(parts) + 1 if parts else 0)
        running = (self._compare is not None and self._compare.is_alive()) \
            or self._compared is not None
        return Observation(now=utcnow(), new=self.commands.state(rec.new_process),
                           route=RouteFacts(plan=view.plan, num_partitions=n, partitions=parts,
                                            transition=view.transition()),
                           compare_running=running)

    def _open_tally(self, rec: RolloutRecord) -> None:
        if self.settings is None:
            return
        try:
            self._tally = OutputTally(self.t.conf, self.settings.route(rec.route).output)
        except (KeyError, BrokerUnavailable):
            self._tally = None

    def _forwarded(self) -> dict[str, int]:
        return self._tally.poll() if self._tally is not None else {}

    # -- acting -----------------------------------------------------------------------------

    def _act(self, action: Action, rec: RolloutRecord) -> list[Event]:
        assert self.commands is not None
        spec = rec.spec
        if isinstance(action, StartNew):
            try:
                return [NewStarted(self.commands.start(spec.start, f"{spec.new}"))]
            except OSError as exc:
                return [StartFailed(str(exc))]
        if isinstance(action, RestartNew):
            self.view.say(f"  restarting {spec.new} to emit the records the router gave it")
            self.commands.stop(rec.new_process, spec.stop_new, f"stop-{spec.new}")
            try:
                return [NewRestarted(self.commands.start(spec.start, f"{spec.new}"))]
            except OSError as exc:
                self.view.say(f"  could not restart {spec.new}: {exc}")
                return []
        if isinstance(action, StopNew):
            self.view.say(f"  stopping {spec.new}")
            self.commands.stop(rec.new_process, spec.stop_new, f"stop-{spec.new}")
            return [NewStopped()]
        if isinstance(action, StopOld):
            self.view.say(f"  $ {spec.stop_old}")
            return [OldStopped(self.commands.run(spec.stop_old, f"stop-{spec.old}"))]
        if isinstance(action, StartCompare):
            self._start_compare(rec, action.share)
            return []
        if isinstance(action, PublishSwitch):
            return [self._switch(rec, action.deadline, action.share)]
        if isinstance(action, PublishRollback):
            return self._roll_back(rec, action)
        raise AssertionError(f"unknown action {action!r}")

    def _switch(self, rec: RolloutRecord, deadline: datetime, share: float) -> Event:
        """The switch of the rollout's step: every key to the new version (``share`` 1), or
        a canary of ``share`` of the keys (a later segment, the old version primary of the
        rest)."""
        view = self.route_view if self.route_view is not None else self._refresh()
        spec = rec.spec
        try:
            if share < 1:
                plan, summary = next_canary_plan(
                    view, Canary(version=spec.new, share=share), At("auto"), spec.margin_ms,
                    spec.catch_up_lag_ms, False, utcnow(), deadline=deadline,
                    issued_by=_issuer(rec))
            else:
                plan, summary = next_plan(view, spec.new, At("auto"), spec.margin_ms,
                                          spec.catch_up_lag_ms, False, utcnow(),
                                          deadline=deadline, issued_by=_issuer(rec))
            assert plan.transition is not None
            publish_plan(self.t, plan)
        except (NextPlanRefused, PlanNotPublished) as exc:
            return SwitchRefused(str(exc))
        except PlanRejected as exc:
            return SwitchRefused(f"the plan would be rejected: {exc.reason}")
        self.view.say(f"  published {summary}")
        return SwitchPublished(plan.epoch, plan.transition[2])

    def _roll_back(self, rec: RolloutRecord, action: PublishRollback) -> list[Event]:
        view = self.route_view if self.route_view is not None else self._refresh()
        epoch = max(view.plan.epoch if view.plan else 0, view.control_epoch or 0) + 1
        plan = CutoverPlan(route=rec.route, epoch=epoch, segments=action.segments,
                           issued_at=utcnow(), issued_by=_issuer(rec))
        try:
            publish_plan(self.t, plan)
        except (PlanRejected, PlanNotPublished) as exc:
            self.view.say(f"  could not publish the rollback plan, retrying: {exc}")
            return []
        self.view.say(f"  published the rollback plan: {rec.spec.old} primary again (epoch "
                      f"{epoch})")
        return [RollbackPublished(epoch)]

    def _start_compare(self, rec: RolloutRecord, share: float | None) -> None:
        spec = rec.spec
        if self.settings is None:
            self._compared = "comparing needs the route's settings (--config)"
            return
        route = self.settings.route(rec.route)

        def run() -> None:
            try:
                self._compared = compare_route(self.t.conf, route, spec.old, spec.new,
                                               spec.compare_for_ms / 1000, spec.max_diff,
                                               stop=self.stop, share=share)
            except CompareStopped:
                return
            except Exception as exc:  # the comparison's failure is the rollout's to report
                self._compared = f"{type(exc).__name__}: {exc}"

        self._compared = None
        self._compare = threading.Thread(target=run, name="compare", daemon=True)
        self._compare.start()
        keys = "" if share is None else f" (the canary's {percent(share)} of the keys)"
        self.view.say(f"  comparing {spec.old} and {spec.new} on the raw topics for "
                      f"{spec.compare_for_ms // 1000}s{keys}")

    def _compare_event(self) -> Event | None:
        result, self._compared = self._compared, None
        if result is None:
            return None
        if isinstance(result, str):
            return CompareFailed(result)
        for line in result.samples:
            self.view.say(f"    {line}")
        return CompareDone(result)


def _issuer(rec: RolloutRecord) -> str:
    owner = rec.owner
    where = f"{owner.host}:{owner.pid}" if owner else "?"
    return f"cutover rollout {rec.run_id[:8]} ({getpass.getuser()}@{where})"


def _serve_metrics(driver: Driver, port: int) -> ThreadingHTTPServer:
    """``/metrics`` of the running rollout (cutover.rollout.metrics), on ``port``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            rec = driver.rec
            if self.path != "/metrics" or rec is None:
                self.send_error(404)
                return
            body = prometheus(rec, utcnow()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
