"""docs/performance.md is what the generator makes of the current results, and a fresh
benchmark run replaces its section, stamped with the commit and broker it ran on."""

from __future__ import annotations

import json
from typing import Any

from tests.docs.performance_page import BENCHMARKS, PAGE, RESULTS, main, merge, render


def test_the_page_is_generated_from_the_current_results() -> None:
    assert main(["--check"]) == 0, "docs/performance.md was edited by hand or is stale"


def test_every_benchmark_has_a_section_and_one_table_at_most() -> None:
    page = PAGE.read_text()
    for _, title, _, _ in BENCHMARKS:
        assert f"\n## {title}\n" in page
    assert page.count("\n## ") == len(BENCHMARKS) + 1   # and the machine


def test_a_fresh_run_replaces_its_section_with_the_commit_and_broker_it_ran_on() -> None:
    data = json.loads(RESULTS.read_text())
    fresh = {"two_workers": {"measured_at": "2027-01-02T03:04:05Z", "load_average": [0.5, 0.4, 0.3],
                             "cpus": 8, "one_per_s": 100, "two_per_s": 190, "ratio": 1.9,
                             "ratio_rounds": [1.9]}}
    merged = merge(data, fresh, "abc1234", "Apache Kafka")
    page = render(merged)
    section = page[page.index("## Two workers on one route"):]
    assert "Measured: abc1234, 2027-01-02, Apache Kafka, load 0.5." in section
    assert "| two / one, median of the rounds | 1.9x |" in section
    assert merged["sections"]["core_decisions"] == data["sections"]["core_decisions"]


def test_a_benchmark_without_a_result_says_so_rather_than_show_an_old_figure() -> None:
    data = json.loads(RESULTS.read_text())
    del data["sections"]["held_bound"]
    page = render(data)
    section = page[page.index("## Held records"):page.index("## Two workers")]
    assert "No result recorded yet: run `make bench`." in section


def test_a_section_merged_before_is_not_stamped_again_with_a_later_commit() -> None:
    data = json.loads(RESULTS.read_text())
    old = dict(data["sections"]["two_workers"])
    merged = merge(data, {"two_workers": {**old, "commit": None}}, "fff0000", "Apache Kafka")
    assert merged["sections"]["two_workers"] == old


def test_the_kafka_streams_anchor_shows_each_ratio_against_its_goal() -> None:
    data = json.loads(RESULTS.read_text())
    run = {"per_s": 1.0, "cpu_us": 1.0, "first_output_s": 4.25, "threads": 40,
           "peak_rss_mb": 200.0}
    row = {"partitions": 64, "raw_records": 1_100_000, "forwarded": 500_000,
           "router": {**run, "first_output_s": 30.0}, "streams": run,
           "router_per_s": 9000, "streams_per_s": 10000, "router_cpu_us": 50.0,
           "streams_cpu_us": 60.0, "rate_ratio": 0.9, "cpu_ratio": 1.2,
           "rate_ratio_rounds": [0.9], "cpu_ratio_rounds": [1.2]}
    fresh = {"streams_anchor": {"measured_at": "2027-01-02T03:04:05Z", "load_average": [1.0],
                                "cpus": 2, "events": 500_000, "rounds": 3, "goal": 1.0,
                                "checked": True, "by_partitions": [row]}}
    page = render(merge(data, fresh, "abc1234", "Apache Kafka"))
    section = page[page.index("## Against Kafka Streams"):]
    assert ("| 64 | 9,000 | 10,000 | 0.90x FAIL | 50.00 µs | 60.00 µs | 1.20x PASS "
            "| 30.0 s / 4.2 s |") in section
    assert "0 lost, 0 duplicated" in section
    assert ("64 partitions: router 40 threads, 200 MB, Kafka Streams 40 threads, 200 MB."
            in section)


def _partition_counts_section() -> dict[str, Any]:
    from dataclasses import asdict

    from tests.bench.partition_targets import Row, targets
    rows = [Row(4, 1, 8.6, 8.9, 21_300, 4.5, 9.0, 41, 231.0, 0, 0, 0),
            Row(64, 1, 35.0, 35.2, 8_500, 18.6, 20.1, 285, 640.0, 0, 0, 0),
            Row(256, 4, 9.0, 9.5, 20_000, 9.0, 11.0, 90, 391.0, 0, 1, 0)]
    return {"measured_at": "2027-01-02T03:04:05Z", "load_average": [0.5, 0.4, 0.3], "cpus": 2,
            "raw_records": 1_000_000, "events": 490_196, "live_rate": 1_000,
            "rows": [asdict(r) for r in rows],
            "targets": [{**asdict(t), "ratio": t.ratio, "passed": t.passed}
                        for t in targets(rows)]}


def test_the_partition_counts_table_marks_each_cell_that_misses_its_target() -> None:
    data = json.loads(RESULTS.read_text())
    page = render(merge(data, {"partition_counts": _partition_counts_section()}, "abc1234",
                        "Apache Kafka"))
    section = page[page.index("## Partition counts"):]
    assert "| 64 | 35.0 s **FAIL** (≤ 10 s) | 35.2 s | 8,500 **FAIL** (39.9% of the rate at 4, " \
           "≥ 90%) | 18.6 s **FAIL** (≤ 10 s) | 20.1 s **FAIL** (≤ 12 s) | 285 | 640 MB | " \
           "0 / 0 / 0 |" in section
    assert "| 256 (4 routes x 64) | 9.0 s | 9.5 s | 20,000 | 9.0 s | 11.0 s | 90 | 391 MB | " \
           "0 / 1 / 0 **FAIL** (≤ 0) |" in section
    assert "| routing rate at 64 / at 4 partitions | 39.9% | at least 90% | 0.443 | " \
           "**FAIL** |" in section
    assert "| peak RSS of the worker at 256 partitions | 391.00 MB | at most 400 MB | 0.978 | " \
           "PASS |" in section
    assert "| threads of the worker at 256 partitions | 90 | at most 100 | 0.900 | PASS |" \
        in section
    assert "Not measured in this run" not in section


def test_a_run_without_256_partitions_says_so() -> None:
    data = json.loads(RESULTS.read_text())
    fresh = _partition_counts_section()
    fresh["rows"] = [r for r in fresh["rows"] if r["partitions"] != 256]
    page = render(merge(data, {"partition_counts": fresh}, "abc1234", "Apache Kafka"))
    assert "Not measured in this run: 256 partitions" in page[page.index("## Partition counts"):]


def test_sizing_comes_from_the_measured_rows_only() -> None:
    data = json.loads(RESULTS.read_text())
    page = render(merge(data, {"partition_counts": _partition_counts_section()}, "abc1234",
                        "Apache Kafka"))
    sizing = page[page.index("### Sizing"):]
    assert "- memory per owned partition: 0.6 MB of peak RSS (from 231 MB at 4 partitions " \
           "to 391 MB at 256);" in sizing
    assert "- threads per owned partition: 0.2 (from 41 to 90);" in sizing
    # 64 misses the start-up and failover limits, 256 duplicated a record: 4 is within them all
    assert "- partitions per worker: up to 4, the largest count measured" in sizing


def test_the_rate_share_is_shown_round_by_round_with_its_median() -> None:
    from dataclasses import asdict

    from tests.bench.partition_targets import RateRound
    data = json.loads(RESULTS.read_text())
    section = _partition_counts_section()
    rounds = [RateRound(4, 64, 21_300, 8_500, False, 30_000, 15_000),
              RateRound(4, 64, 20_000, 19_000, True, 30_000, 29_000),
              RateRound(4, 64, 20_000, 20_400, False, 30_000, 30_300)]
    section["rate_rounds"] = [{**asdict(r), "share": r.share, "loop_share": r.loop_share}
                              for r in rounds]
    page = render(merge(data, {"partition_counts": section}, "abc1234", "Apache Kafka"))
    assert "Routing rate at 64 / at 4 partitions in 3 rounds, each a fresh backlog routed by a " \
           "fresh worker at both counts, the order alternating: 39.9% (4 first), 95.0% (64 " \
           "first), 102.0% (4 first); their median, 95.0%, is the figure of the target." in page
    assert "its rate at 64 / at 4 partitions was 50.0%, 96.7%, 101.0%, a median of 96.7%." \
        in page


def test_a_rate_share_not_measured_is_marked_as_such() -> None:
    """A count whose backlog gave no rate (a smoke run's backlog arrives in one read) fails the
    share target, and its cell says so instead of breaking the page."""
    from dataclasses import asdict

    from tests.bench.partition_targets import Row, targets
    rows = [Row(4, 1, 4.3, 4.3, None, 2.5, 6.1, 29, 126.5, 0, 0, 0),
            Row(16, 1, 2.6, 2.6, 345_188, 2.6, 6.0, 29, 125.4, 0, 0, 0)]
    section = {**_partition_counts_section(), "rows": [asdict(r) for r in rows],
               "targets": [{**asdict(t), "ratio": t.ratio, "passed": t.passed}
                           for t in targets(rows)]}
    page = render(merge(json.loads(RESULTS.read_text()), {"partition_counts": section},
                        "abc1234", "Apache Kafka"))
    assert "| 16 | 2.6 s | 2.6 s | 345,188 **FAIL** (not measured, ≥ 90%) |" in page
