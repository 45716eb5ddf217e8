"""A rollout as Prometheus metrics, drawn from its journal record alone (so the running rollout
serves them, and anything that reads the status topic could).

The router's ``/metrics`` already has watermarks, horizons, held records and counters per
route; these add what only the rollout knows: its phase (one series per phase, 1 for the
current one, so a Grafana state timeline shows the whole rollout), how long each phase took,
the deadline, and the comparison's counts. ``docker/grafana/cutover-rollout.json`` draws both.
"""

from __future__ import annotations

from datetime import datetime

from cutover.rollout.journal import Phase, RolloutRecord

METRICS = {
    "rollout_phase": ("gauge", "1 for the rollout's current phase, 0 for the others"),
    "rollout_phase_seconds": ("gauge", "seconds spent in each phase so far (the last time "
                                       "it was entered)"),
    "rollout_seconds": ("gauge", "seconds since the rollout started"),
    "rollout_deadline_seconds": ("gauge", "seconds left until the rollout's deadline (negative "
                                          "once passed)"),
    "rollout_restarts_total": ("counter", "restarts of the new version during a rollback"),
    "rollout_compared_records": ("gauge", "records of the comparison, by result"),
    "rollout_canary_share": ("gauge", "the share of the keys the rollout's current step gives "
                                      "the new version (a rollout by key share only)"),
}


def prometheus(rec: RolloutRecord, now: datetime) -> str:
    """The rollout's metrics in Prometheus text format."""
    labels = f'route="{rec.route}",from="{rec.spec.old}",to="{rec.spec.new}"'
    lines: list[str] = []

    def head(name: str) -> None:
        kind, help_ = METRICS[name]
        lines.append(f"# HELP cutover_{name} {help_}")
        lines.append(f"# TYPE cutover_{name} {kind}")

    head("rollout_phase")
    for phase in Phase:
        lines.append(f'cutover_rollout_phase{{{labels},phase="{phase.value}"}} '
                     f"{int(phase is rec.phase)}")
    head("rollout_phase_seconds")
    last = {span.phase: span for span in rec.phases}
    for phase, span in last.items():
        lines.append(f'cutover_rollout_phase_seconds{{{labels},phase="{phase.value}"}} '
                     f"{span.seconds(now):.3f}")
    end = rec.phases[-1].ended_at if rec.phase.terminal and rec.phases else None
    head("rollout_seconds")
    lines.append(f"cutover_rollout_seconds{{{labels}}} "
                 f"{((end or now) - rec.started_at).total_seconds():.3f}")
    head("rollout_deadline_seconds")
    lines.append(f"cutover_rollout_deadline_seconds{{{labels}}} "
                 f"{(rec.deadline_at - now).total_seconds():.3f}")
    head("rollout_restarts_total")
    lines.append(f"cutover_rollout_restarts_total{{{labels}}} "
                 f"{rec.rollback.restarts if rec.rollback else 0}")
    if rec.spec.canary:
        head("rollout_canary_share")
        lines.append(f'cutover_rollout_canary_share{{{labels},step="{rec.step + 1}"}} '
                     f"{rec.spec.step_share(rec.step)}")
    if rec.compare is not None:
        head("rollout_compared_records")
        c = rec.compare.counts
        for result, n in (("equal", c.equal), ("different", c.different),
                          ("only_old", c.only_old), ("only_new", c.only_new),
                          ("unreadable", c.unreadable)):
            lines.append(f'cutover_rollout_compared_records{{{labels},result="{result}"}} {n}')
    return "\n".join(lines) + "\n"
