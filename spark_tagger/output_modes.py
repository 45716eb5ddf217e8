"""Which streaming output modes the tagger serves, and what the router does with each.

* ``append``: every row is emitted once, when the watermark has passed its event time.
* ``update``: a windowed aggregation re-emits a window each batch it grows. Every re-emission
  carries the window's end as its event time, so all of a window's updates are routed to the
  same version, and the old version emits none below a boundary ``T`` once its watermark passes
  ``T`` (Spark drops later input for those windows): ordered handover still shows a consumer
  every update of the windows ending below ``T`` before any of those ending at or above it.
  Dedup identity ``record`` (key, value, event time) keeps each distinct update and drops only
  a replay's byte-identical copies; ``key_event_time`` keeps the first emission of each window
  and drops its later updates. The tagger cannot see the route's settings, so it says this at
  start.
* ``complete``: every batch re-emits the whole result table, windows long closed included, so
  a record's event time says nothing about when it was produced: refused at start.
"""

from __future__ import annotations

import sys

from spark_tagger.refusal import TaggerError

UPDATE_WARNING = (
    "{query} runs in update output mode: it re-emits a window each batch the window grows, all "
    "with the window's end as event time; route it with dedup identity 'record' (the default), "
    "which keeps every update, not 'key_event_time', which keeps only each window's first "
    "emission and drops its updates"
)


def check_output_mode(mode: str | None, query: str, quiet: bool) -> None:
    """Refuse complete mode; say at start what update mode asks of the route."""
    name = (mode or "append").strip().lower()
    if name == "complete":
        raise TaggerError(
            f"{query} uses complete output mode, which re-emits the whole result every batch "
            "and so gives its records no event time the router can route by; use append or "
            "update output mode"
        )
    if name == "update" and not quiet:
        print(f"cutover tag: warning: {UPDATE_WARNING.format(query=query)}", file=sys.stderr,
              flush=True)
