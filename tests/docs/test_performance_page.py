"""docs/performance.md is what the generator makes of the current results, and a fresh
benchmark run replaces its section, stamped with the commit and broker it ran on."""

from __future__ import annotations

import json

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
