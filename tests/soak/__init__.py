"""The chaos soak (``make soak``): faults at random against a running route, checked record by
record. Modules: ``workload`` (the two tagged versions), ``plans`` (switches back and forth),
``router_workers`` (worker processes), ``cluster_faults`` (the faults), ``checker`` (the
output against the reference), ``gaps`` and ``rss`` (what is measured), ``chaos`` (one run),
``report`` (docs/soak.md)."""
