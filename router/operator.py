"""``cutover switch | status | wait | plan``: the operator's side of the control and status
topics.

The CLI reads the newest status message of every worker, keeps for each partition the newest
message that lists it, and recomputes readiness over all partitions with
:func:`router.readiness.readiness`, the same function the workers use.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from pydantic import ValidationError

from cutover.cli import CliError
from cutover.kafka_errors import denial, principal_of
from cutover.plan import (
    CutoverPlan,
    PlanRejected,
    Segment,
    parse_plan,
    plan_key_from_env,
    sign_plan,
    utcnow,
)
from cutover.settings import SettingsError, load_settings
from cutover.status import (
    Counters,
    PartitionStatus,
    PlanRejectedEvent,
    RouteStatus,
    Transition,
    TransitionState,
    parse_status,
)
from router.kafka_io import (
    AccessDenied,
    BrokerUnavailable,
    base_conf,
    partitions_of,
    reader_conf,
    wait_for_broker,
)
from router.readiness import PartitionProgress, progress_of, readiness

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise CliError(f"{text!r} is not a duration; write e.g. 500ms, 30s, 10m, 2h")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])


def parse_deadline(text: str, now: datetime) -> datetime:
    """A duration from now (``15m``, ``+2h``), epoch ms or an ISO-8601 time."""
    relative = text.strip().removeprefix("+")
    if _DURATION.match(relative):
        return now + timedelta(milliseconds=parse_duration_ms(relative))
    return datetime.fromtimestamp(parse_instant_ms(text) / 1000, UTC)


def parse_instant_ms(text: str) -> int:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
                       "(e.g. 2026-01-01T00:10:00Z)") from None
    if dt.tzinfo is None:
        raise CliError(f"{text!r} has no time zone; add Z or +00:00")
    return int(dt.timestamp() * 1000)


# -- connection --------------------------------------------------------------------------------


@dataclass
class Target:
    conf: dict[str, Any]
    control_topic: str
    status_topic: str
    routes: dict[str, int | None] = field(default_factory=dict)  # route -> partitions if known


def target_of(args: argparse.Namespace) -> Target:
    if getattr(args, "config", None):
        try:
            s = load_settings(args.config)
        except SettingsError as exc:
            raise CliError(f"{exc} (fix the settings file)") from None
        conf = base_conf(args.bootstrap or s.bootstrap, dict(s.kafka))
        t = Target(conf, s.control_topic, s.status_topic)
        for r in s.routes:
            t.routes[r.name] = None
            t.routes[r.name] = _inputs_partitions(conf, r.inputs[0])
        return t
    if not getattr(args, "bootstrap", None):
        raise CliError("say where the cluster is: --config FILE (the router's settings) or "
                       "--bootstrap HOST:PORT")
    return Target(base_conf(args.bootstrap), args.control_topic, args.status_topic)


def _inputs_partitions(conf: dict[str, Any], topic: str) -> int | None:
    try:
        return partitions_of(conf, topic)
    except Exception:
        return None


def _connect(t: Target) -> None:
    try:
        wait_for_broker({k: v for k, v in t.conf.items() if k != "logger"} | {"log_level": 0},
                        give_up_after=10)
    except BrokerUnavailable as exc:
        raise CliError(str(exc), 3) from None


# -- reading state ------------------------------------------------------------------------------


@dataclass
class RouteView:
    """A route's state merged from every worker's newest status message."""

    route: str
    plan: CutoverPlan | None = None
    control_epoch: int | None = None   # highest epoch seen on the control topic (any validity)
    num_partitions: int | None = None
    partitions: dict[int, tuple[PartitionStatus, int | None, str, datetime]] = \
        field(default_factory=dict)  # p -> (status, epoch, worker, updated_at)
    counters: Counters = field(default_factory=Counters)
    workers: dict[str, RouteStatus] = field(default_factory=dict)
    rejections: list[PlanRejectedEvent] = field(default_factory=list)

    def progress(self) -> dict[int, PartitionProgress]:
        """Each partition's own applied epoch and effective boundary, as its owner published
        them (a partition status without them falls back to its message's epoch)."""
        return {p: progress_of(ps, epoch) for p, (ps, epoch, _, _) in self.partitions.items()}

    def transition(self) -> Transition:
        n = self.num_partitions or (max(self.partitions) + 1 if self.partitions else 0)
        return readiness(self.plan, self.progress(), n, utcnow())

    def max_horizon(self) -> int | None:
        hs = [ps.horizon for ps, *_ in self.partitions.values() if ps.horizon is not None]
        return max(hs) if hs else None


STATUS_TAIL = 1000   # status records per partition read first (the newest of every worker)
CONTROL_TAIL = 1000  # control records per partition read first (plans are rare)


class _Follower:
    """One consumer on one topic, from a bounded tail (or the beginning) on, read
    incrementally: :meth:`read_new` returns what arrived since the last call, up to the end."""

    def __init__(self, conf: dict[str, Any], topic: str, tail: int | None) -> None:
        self.conf, self.topic, self.tail = conf, topic, tail
        self.consumer: Consumer | None = None
        self.pos: dict[int, int] = {}
        self.complete = True   # the tail reached the beginning of every partition

    def _open(self) -> bool:
        n = partitions_of(self.conf, self.topic)
        if n is None:
            return False
        c = Consumer({**reader_conf(self.conf), "fetch.wait.max.ms": 20})
        assign = []
        for p in range(n):
            # ListOffsets(LATEST) is at or below the real end on every broker (the test
            # broker answers the last batch's base + 1): a start from it reads at least
            # ``tail`` records.
            low, high = c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10,
                                                cached=False)
            start = max(low, high - self.tail) if self.tail is not None else low
            self.complete = self.complete and start <= low
            self.pos[p] = start
            assign.append(TopicPartition(self.topic, p, start))
        c.assign(assign)
        self.consumer = c
        return True

    def read_new(self, timeout: float = 30.0) -> list[Message]:
        if self.consumer is None and not self._open():
            return []
        c = self.consumer
        assert c is not None
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        asked = False
        while True:
            msgs = c.consume(5000, 0.02)
            for msg in msgs:
                if msg.error() is None:
                    self.pos[msg.partition()] = msg.offset() + 1
                    out.append(msg)
                elif refused := denial(msg.error(), self.topic, self.conf, "Read"):
                    raise AccessDenied(refused)
            if not msgs:
                # The cached high watermark is the last fetch's: ask the broker once per call,
                # so that a record written before this call is always read by it.
                behind = False
                for p, at in self.pos.items():
                    tp = TopicPartition(self.topic, p)
                    _, high = c.get_watermark_offsets(tp, cached=True)
                    if not asked:
                        with contextlib.suppress(KafkaException):
                            high = max(high, c.get_watermark_offsets(tp, timeout=5)[1])
                    behind = behind or high < 0 or at < high
                asked = True
                if not behind:
                    return out
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"could not read {self.topic} to its end within "
                                        f"{timeout:.0f}s")

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


@dataclass
class _RouteState:
    plan: CutoverPlan | None = None
    control_epoch: int | None = None
    workers: dict[str, RouteStatus] = field(default_factory=dict)
    rejections: list[PlanRejectedEvent] = field(default_factory=list)


class StateReader:
    """The routes' state from the status and control topics, kept open and read
    incrementally (``cutover wait`` polls one of these).

    Only a tail of each topic is read first: every status message carries the last good plan
    and each worker publishes its partitions every ``status_interval_s``, so the newest
    ``STATUS_TAIL`` records hold the current state. When they do not (a route with no status,
    no plan, or a partition nobody reported in the tail), everything is read from the start.
    """

    def __init__(self, t: Target, route: str | None = None, *,
                 status_tail: int | None = STATUS_TAIL,
                 control_tail: int | None = CONTROL_TAIL) -> None:
        self.t, self.route = t, route
        self._tails = (status_tail, control_tail)
        self._start(*self._tails)

    def _start(self, status_tail: int | None, control_tail: int | None) -> None:
        self.state: dict[str, _RouteState] = {}
        self.status = _Follower(self.t.conf, self.t.status_topic, status_tail)
        self.control = _Follower(self.t.conf, self.t.control_topic, control_tail)
        self.full = status_tail is None and control_tail is None

    def close(self) -> None:
        self.status.close()
        self.control.close()

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _routes(self) -> set[str]:
        return ({self.route} if self.route is not None
                else set(self.t.routes) | set(self.state))

    def _state(self, r: str) -> _RouteState:
        return self.state.setdefault(r, _RouteState())

    def refresh(self) -> dict[str, RouteView]:
        try:
            self._read()
            if not self.full and not (self.status.complete and self.control.complete) \
                    and self._lacking():
                self.close()
                self._start(None, None)
                self._read()
        except BrokerUnavailable as exc:
            raise CliError(f"{exc}", 3) from None
        return self.views()

    def _lacking(self) -> bool:
        for r in self._routes():
            st = self.state.get(r)
            if st is None or st.plan is None or not st.workers:
                return True
            n = self.t.routes.get(r) or max((w.num_partitions or 0
                                             for w in st.workers.values()), default=0)
            seen = {p for w in st.workers.values() for p in w.partitions}
            if any(p not in seen for p in range(n)):
                return True
        return False

    def _read(self) -> None:
        route = self.route
        for msg in self.status.read_new():
            if msg.value() is None:
                continue
            try:
                st = parse_status(msg.value())
            except (ValidationError, ValueError):
                continue
            if route is not None and st.route != route:
                continue
            rs = self._state(st.route)
            if st.plan is not None and (rs.plan is None or st.plan.epoch > rs.plan.epoch):
                rs.plan = st.plan
            if isinstance(st, PlanRejectedEvent):
                rs.rejections.append(st)
                continue
            rs.workers[st.worker] = st
        key = plan_key_from_env()
        for msg in self.control.read_new():
            try:
                r = (msg.key() or b"").decode()
            except UnicodeDecodeError:
                continue
            if not r or (route is not None and r != route):
                continue
            try:
                data = json.loads(msg.value() or b"null")
                if isinstance(data, dict) and isinstance(data.get("epoch"), int):
                    rs = self._state(r)
                    rs.control_epoch = max(rs.control_epoch or 0, data["epoch"])
                plan = parse_plan(msg.value(), route=r, key=key)
            except (PlanRejected, ValueError, UnicodeDecodeError):
                continue
            rs = self._state(r)
            if rs.plan is None or plan.epoch > rs.plan.epoch:
                rs.plan = plan

    def views(self) -> dict[str, RouteView]:
        """Merge: per partition the newest status of any worker that lists it."""
        views: dict[str, RouteView] = {}
        for r in self._routes():
            st = self.state.get(r, _RouteState())
            v = RouteView(r, plan=st.plan, control_epoch=st.control_epoch,
                          num_partitions=self.t.routes.get(r), workers=dict(st.workers),
                          rejections=list(st.rejections))
            views[r] = v
            for w in v.workers.values():
                if w.num_partitions and not v.num_partitions:
                    v.num_partitions = w.num_partitions
                for p, ps in w.partitions.items():
                    held = v.partitions.get(p)
                    if held is None or w.updated_at >= held[3]:
                        epoch = ps.epoch if ps.epoch is not None else w.epoch
                        v.partitions[p] = (ps, epoch, w.worker, w.updated_at)
            for w in {w for _, _, w, _ in v.partitions.values()}:
                v.counters = v.counters.add(v.workers[w].counters)
        return views


def read_views(t: Target, route: str | None = None) -> dict[str, RouteView]:
    """The routes' merged state now (reads the topics' tails; see :class:`StateReader`)."""
    with StateReader(t, route) as reader:
        return reader.refresh()


# -- switch -------------------------------------------------------------------------------------


def _cmd_switch(args: argparse.Namespace) -> int:
    t = target_of(args)
    _connect(t)
    v = read_views(t, args.route)[args.route]
    margin = parse_duration_ms(args.margin)
    now = utcnow()
    deadline = parse_deadline(args.deadline, now) if args.deadline else None
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    if v.plan is None:
        epoch = (v.control_epoch or 0) + 1
        plan = CutoverPlan(route=args.route, epoch=epoch,
                           segments=(Segment(from_event_time=None, primary=args.to),),
                           deadline=deadline, issued_at=now, issued_by=who)
        return _publish(t, plan, f"first plan for route {args.route}: {args.to} is primary "
                                 "for all event times")
    current = v.plan.segments[-1].primary
    if args.to == current and not args.force:
        raise CliError(f"{args.to!r} is already the primary of route {args.route} (epoch "
                       f"{v.plan.epoch}); nothing to switch")
    n = v.num_partitions or 0
    missing = [p for p in range(n) if p not in v.partitions]
    if (not v.partitions or missing) and not args.force:
        raise CliError(f"no router status for partitions {missing or 'any'} of route "
                       f"{args.route}; start the router (or wait for its first status) and "
                       "retry, or pass --force")
    horizon = v.max_horizon()
    top_wm = max((wm for ps, *_ in v.partitions.values() for wm in ps.watermarks.values()),
                 default=None)
    base = max(x for x in (horizon, top_wm, 0) if x is not None)
    if args.at == "auto":
        boundary = base + margin
    elif args.at.startswith("+"):
        boundary = base + parse_duration_ms(args.at[1:])
    else:
        boundary = parse_instant_ms(args.at)
    if not args.force:
        for p, (ps, *_rest) in sorted(v.partitions.items()):
            if ps.horizon is not None and boundary < ps.horizon + margin:
                raise CliError(
                    f"boundary {boundary} is not ahead of partition {p}'s horizon "
                    f"{ps.horizon} by the margin {margin} ms; use --at auto, --at "
                    f"{ps.horizon + margin} or later, or --force to let the router pin it")
        max_lag = parse_duration_ms(args.max_lag)
        for p, (ps, *_rest) in sorted(v.partitions.items()):
            wm = ps.watermarks.get(args.to)
            lead = max(ps.watermarks.values(), default=None)
            if wm is None:
                raise CliError(f"version {args.to!r} has no watermark on partition {p}: is it "
                               "running and tagged? Start it and wait for its heartbeats, or "
                               "--force")
            if lead is not None and lead - wm > max_lag:
                raise CliError(f"version {args.to!r} lags on partition {p}: watermark {wm}, "
                               f"{lead - wm} ms behind (limit {max_lag} ms); wait for it to "
                               "catch up, raise --max-lag, or --force")
    kept = [s for s in v.plan.segments if s.from_event_time is None
            or s.from_event_time < boundary]
    if kept[-1].primary != args.to:
        kept.append(Segment(from_event_time=boundary, primary=args.to))
    epoch = max(v.plan.epoch, v.control_epoch or 0) + 1
    plan = CutoverPlan(route=args.route, epoch=epoch, segments=tuple(kept), deadline=deadline,
                       issued_at=now, issued_by=who)
    return _publish(t, plan, f"route {args.route}: {current} -> {args.to} at event time "
                             f"{boundary} (epoch {epoch})")


def _publish(t: Target, plan: CutoverPlan, summary: str) -> int:
    key = plan_key_from_env()
    if key is not None:
        plan = sign_plan(plan, key)
    try:
        parse_plan(plan.to_json(), route=plan.route, key=key)
    except PlanRejected as exc:
        raise CliError(f"the plan would be rejected: {exc.reason}") from None
    producer = Producer({k: v for k, v in t.conf.items()})
    errors: list[str] = []
    producer.produce(t.control_topic, plan.to_json(), plan.route.encode(),
                     on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
    if producer.flush(15) or errors:
        refused = [r for r in errors if "authorization failed" in r.lower()]
        if refused:
            raise CliError(f"the broker refused to let {principal_of(t.conf)} publish the plan "
                           f"to {t.control_topic} ({refused[0]}); only the operators' identity "
                           "may write it: run the command with their credentials (or, if this "
                           f"is an operator's identity, grant it Write on {t.control_topic})", 3)
        raise CliError(f"could not publish the plan to {t.control_topic} "
                       f"({errors[0] if errors else 'timeout'}); check the broker and retry", 3)
    print(f"published {summary}")
    return 0


# -- status / wait ------------------------------------------------------------------------------


def _merged_json(v: RouteView) -> dict[str, Any]:
    tr = v.transition()
    return {
        "route": v.route, "epoch": v.plan.epoch if v.plan else None,
        "transition": tr.model_dump(mode="json", by_alias=True),
        "num_partitions": v.num_partitions,
        "partitions": {str(p): {**ps.model_dump(mode="json"), "epoch": e, "worker": w,
                                "updated_at": u.isoformat()}
                       for p, (ps, e, w, u) in sorted(v.partitions.items())},
        "counters": v.counters.model_dump(mode="json"),
        "plan": v.plan.model_dump(mode="json") if v.plan else None,
        "last_rejection": v.rejections[-1].model_dump(mode="json") if v.rejections else None,
    }


def _print_table(v: RouteView) -> None:
    tr = v.transition()
    epoch = v.plan.epoch if v.plan else "-"
    print(f"route {v.route}  epoch {epoch}  transition {tr.state.value}", end="")
    if tr.from_ is not None:
        print(f"  {tr.from_} -> {tr.to} at {tr.boundary}", end="")
    print()
    if tr.holdups:
        print(f"  waiting on: {tr.describe_holdups()}")
    versions = sorted({ver for ps, *_ in v.partitions.values() for ver in ps.watermarks})
    head = (f"  {'part':>4} {'worker':<18} {'epoch':>5} {'boundary':>15} {'horizon':>15} "
            f"{'held':>6} ") + " ".join(
        f"{'wm ' + ver:>16} {'lag':>8}" for ver in versions)
    print(head)
    for p in range(v.num_partitions or 0) if v.num_partitions else sorted(v.partitions):
        if p not in v.partitions:
            print(f"  {p:>4} {'(no router)':<18}")
            continue
        ps, e, w, _ = v.partitions[p]
        cells = []
        for ver in versions:
            wm = ps.watermarks.get(ver)
            lag = (ps.horizon - wm) if (wm is not None and ps.horizon is not None) else None
            cells.append(f"{wm if wm is not None else '-':>16} "
                         f"{lag if lag is not None else '-':>8}")
        print(f"  {p:>4} {w[:18]:<18} {e if e is not None else '-':>5} "
              f"{ps.boundary if ps.boundary is not None else '-':>15} "
              f"{ps.horizon if ps.horizon is not None else '-':>15} "
              f"{ps.held:>6} " + " ".join(cells))
    c = v.counters
    sup = ", ".join(f"{k}={n}" for k, n in sorted(c.suppressed.items())) or "0"
    print(f"  forwarded {c.forwarded}  suppressed {sup}  duplicates {c.duplicates}  "
          f"dead-lettered {c.dead_lettered}  held {c.held}")
    if v.rejections:
        r = v.rejections[-1]
        print(f"  last rejected plan: epoch {r.epoch}: {r.reason}")


def _cmd_status(args: argparse.Namespace) -> int:
    t = target_of(args)
    _connect(t)
    views = read_views(t, args.route)
    if args.route and args.route in views and not views[args.route].workers \
            and views[args.route].plan is None:
        raise CliError(f"no plan and no status for route {args.route!r}; check the route name "
                       "and that a router is running")
    if args.json:
        print(json.dumps({r: _merged_json(v) for r, v in sorted(views.items())}, indent=2))
    else:
        for _, v in sorted(views.items()):
            _print_table(v)
    return 0


def _cmd_wait(args: argparse.Namespace) -> int:
    t = target_of(args)
    _connect(t)
    want = TransitionState.CLEAR_TO_TEARDOWN
    timeout = parse_duration_ms(args.timeout) / 1000
    deadline = time.monotonic() + timeout
    with StateReader(t, args.route) as reader:
        return _wait_loop(args, reader, want, deadline)


def _wait_loop(args: argparse.Namespace, reader: StateReader, want: TransitionState,
               deadline: float) -> int:
    """Poll one open reader: each round reads only what the workers published since."""
    while True:
        v = reader.refresh()[args.route]
        last = v.transition()
        if last.state is want:
            print(f"route {args.route}: CLEAR_TO_TEARDOWN — {last.from_!r} may be torn down "
                  f"(epoch {v.plan.epoch if v.plan else '-'}, boundary {last.boundary})")
            return 0
        if last.state is TransitionState.STALLED:
            print(f"route {args.route}: STALLED: {last.describe_holdups()}. Roll back with "
                  "`cutover switch --to <old>` or extend the deadline.", file=sys.stderr)
            return 3
        if last.state is TransitionState.STEADY and v.plan is not None:
            print(f"route {args.route}: STEADY (no transition in plan epoch {v.plan.epoch})",
                  file=sys.stderr)
            return 5
        if time.monotonic() >= deadline:
            print(f"route {args.route}: still {last.state.value} after {args.timeout}: "
                  f"{last.describe_holdups() or 'no router status yet'}", file=sys.stderr)
            return 4
        time.sleep(min(args.interval, max(deadline - time.monotonic(), 0.05)))


# -- plan ---------------------------------------------------------------------------------------


def _cmd_plan_validate(args: argparse.Namespace) -> int:
    try:
        raw = Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        plan = parse_plan(raw, key=plan_key_from_env())
    except PlanRejected as exc:
        raise CliError(f"{args.file}: plan rejected: {exc.reason}", 1) from None
    tr = plan.transition
    what = f"{tr[0]} -> {tr[1]} at {tr[2]}" if tr else f"{plan.segments[0].primary} only"
    print(f"{args.file}: valid plan for route {plan.route}, epoch {plan.epoch}: {what}")
    return 0


def _cmd_plan_show(args: argparse.Namespace) -> int:
    t = target_of(args)
    _connect(t)
    v = read_views(t, args.route)[args.route]
    if v.plan is None:
        raise CliError(f"route {args.route!r} has no plan yet; publish one with `cutover "
                       f"switch --route {args.route} --to <version> --at auto`", 1)
    print(json.dumps(v.plan.model_dump(mode="json"), indent=2))
    return 0


def _cmd_plan_init(args: argparse.Namespace) -> int:
    t = target_of(args)
    _connect(t)
    v = read_views(t, args.route)[args.route]
    if v.plan is not None:
        raise CliError(f"route {args.route} already has a plan (epoch {v.plan.epoch}); use "
                       "`cutover switch` to change it")
    plan = CutoverPlan(route=args.route, epoch=(v.control_epoch or 0) + 1,
                       segments=(Segment(from_event_time=None, primary=args.primary),),
                       issued_at=utcnow(), issued_by=f"{getpass.getuser()}@{socket.gethostname()}")
    return _publish(t, plan, f"first plan for route {args.route}: {args.primary} is primary")


# -- registration -------------------------------------------------------------------------------


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="the router's settings file (topics, security)")
    p.add_argument("--bootstrap", help="HOST:PORT, when there is no settings file at hand")
    p.add_argument("--control-topic", default="bg.control")
    p.add_argument("--status-topic", default="bg.status")


def register_operator_commands(sub: Any) -> None:
    p = sub.add_parser("switch", help="publish the next plan of a route, after safety checks")
    _cluster_args(p)
    p.add_argument("--route", required=True)
    p.add_argument("--to", required=True, help="the version to make primary")
    p.add_argument("--at", default="auto",
                   help="boundary event time: epoch ms, ISO-8601, +duration past the newest "
                        "horizon, or auto")
    p.add_argument("--deadline", help="when the transition counts as stalled: a duration "
                                      "from now (15m, +2h) or an ISO-8601 time")
    p.add_argument("--margin", default="10s",
                   help="how far ahead of every partition's horizon the boundary must be")
    p.add_argument("--max-lag", default="60s",
                   help="how far the target version's watermark may trail the leading one")
    p.add_argument("--force", action="store_true", help="skip the safety checks")
    p.set_defaults(func=_cmd_switch)

    p = sub.add_parser("status", help="show routes, transitions, partitions and counters")
    _cluster_args(p)
    p.add_argument("--route")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("wait", help="block until a transition is clear to tear down")
    _cluster_args(p)
    p.add_argument("--route", required=True)
    p.add_argument("--for", dest="for_", default="clear-to-teardown",
                   choices=["clear-to-teardown"])
    p.add_argument("--timeout", default="10m")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_wait)

    p = sub.add_parser("plan", help="validate, show or initialise plans")
    psub = p.add_subparsers(dest="plan_command", metavar="ACTION", required=True)
    q = psub.add_parser("validate", help="check a plan file as the router would")
    q.add_argument("file")
    q.set_defaults(func=_cmd_plan_validate)
    q = psub.add_parser("show", help="print the current plan of a route")
    _cluster_args(q)
    q.add_argument("--route", required=True)
    q.set_defaults(func=_cmd_plan_show)
    q = psub.add_parser("init", help="publish the first plan of a route (one primary)")
    _cluster_args(q)
    q.add_argument("--route", required=True)
    q.add_argument("--primary", required=True)
    q.set_defaults(func=_cmd_plan_init)
