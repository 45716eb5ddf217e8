"""The metrics a router worker exports: each one's name, type and help, declared once, and the
lines that introduce it in the Prometheus text (router.worker.status_publisher renders them;
the dedup store's memory and the watchdog add their own)."""

from __future__ import annotations

# Every metric the worker exports: name -> (type, help). The alert rules
# (deploy/helm/cutover-router/files/alerts.yaml) may use only these (a test checks it).
METRICS: dict[str, tuple[str, str]] = {
    "build_info": ("gauge", "1, labelled with the versions this worker runs"),
    "forwarded_total": ("counter", "records forwarded to the output topic by this worker"),
    "partition_forwarded_total": ("counter", "records forwarded by this worker, per partition"),
    "suppressed_total": ("counter", "records suppressed (not the primary), per version"),
    "duplicates_total": ("counter", "duplicate records removed"),
    "dead_lettered_total": ("counter", "records sent to the dead-letter topic"),
    "dead_letters_total": ("counter", "records sent to the dead-letter topic, by reason"),
    "pauses_total": ("counter", "times a partition reached max_held and paused"),
    "reread_total": ("counter", "records consumed while their partition's commit failed, "
                                "dropped and read again from its checkpoint"),
    "plan_rejections_total": ("counter", "plans this worker rejected"),
    "held_records": ("gauge", "records held for ordered handover now"),
    "paused_partitions": ("gauge", "partitions paused at max_held now"),
    "plan_epoch": ("gauge", "epoch of the plan in force"),
    "transition_state": ("gauge", "1 for the current transition state"),
    "watermark_seconds": ("gauge", "a version's event-time watermark on a partition, epoch "
                                   "seconds"),
    "horizon_seconds": ("gauge", "largest event time routed on a partition, epoch seconds"),
    "watermark_lag_seconds": ("gauge", "how far a version's watermark trails the partition's "
                                       "horizon, seconds"),
    "consumer_lag_records": ("gauge", "records of a raw partition not yet consumed"),
    "added_latency_seconds": ("histogram", "raw record timestamp to output write, seconds"),
    "status_updated_timestamp_seconds": ("gauge", "when this worker last built its status "
                                                  "(stops moving when the worker stalls)"),
    # router.worker.watchdog.Progress exports these three.
    "worker_stalled": ("gauge", "1 while the worker owns partitions with input waiting and "
                                "decides nothing for stall_after_s, or a step has not returned"),
    "worker_stalls_total": ("counter", "stalls the watchdog reported since start"),
    "worker_rebuilds_total": ("counter", "client rebuilds (rejoins) since start"),
    # router.worker.orphans.Nudger exports it.
    "group_nudges_total": ("counter", "rebalances this worker started after its data consumer "
                                      "took its instance's place"),
    "store_filter_bytes": ("gauge", "front filters the worker's dedup stores hold together, "
                                    "bytes (router.dedup.memory)"),
    "store_filter_budget_bytes": ("gauge", "the worker's budget for those filters "
                                           "(store_memory.filter_bytes), bytes"),
    "store_block_cache_bytes": ("gauge", "the block cache the worker's dedup stores share "
                                         "holds, bytes (at most store_memory."
                                         "block_cache_bytes)"),
    "store_write_buffer_bytes": ("gauge", "memtables of the worker's dedup stores together, "
                                          "bytes (at most store_memory.write_buffer_bytes)"),
    "store_memtable_flushes_total": ("counter", "memtables of the worker's dedup stores "
                                                "flushed to keep them within store_memory."
                                                "write_buffer_bytes together"),
    "store_filter_refusals_total": ("counter", "filter buckets given less than they asked for "
                                               "because the budget was spent: raise "
                                               "store_memory.filter_bytes"),
    # Kept for dashboards made before the names above; removed in a later release.
    "held": ("gauge", "deprecated: use cutover_held_records"),
    "watermark_ms": ("gauge", "deprecated: use cutover_watermark_seconds"),
    "horizon_ms": ("gauge", "deprecated: use cutover_horizon_seconds"),
}


def family_header(name: str) -> list[str]:
    """The ``# HELP`` and ``# TYPE`` lines of a metric declared in :data:`METRICS`."""
    kind, help_ = METRICS[name]
    return [f"# HELP cutover_{name} {help_}", f"# TYPE cutover_{name} {kind}"]
