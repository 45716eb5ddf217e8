"""Router on the real broker: a poison timestamp dead-letters itself and nothing else; dedup
across a restart with a store far larger than its memory budget, whose filter answers "maybe"
for every new identity (false positives that must cost a read, never a record)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cutover.headers import TaggedRecord
from tests.integration.harness import (
    BASE_T,
    STEP,
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
    produce_raw,
    run_cli_json,
)

pytestmark = pytest.mark.broker

TEN_YEARS_MS = 10 * 365 * 86_400_000


def test_a_poison_timestamp_dead_letters_only_itself(bootstrap: str, tmp_path: Path) -> None:
    """One record of the primary stamped ten years ahead, and one of the other version, in the
    middle of a normal stream on three partitions: those two go to the dead-letter topic,
    every other record is forwarded, and the switch is taken on every partition."""
    env = Env(bootstrap, tmp_path, partitions=3)
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue, green = Job(env, "blue"), Job(env, "green")
        assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
        for lo in range(0, 300, 100):
            blue.emit(events(lo, lo + 100))
            green.emit(events(lo, lo + 100))
        poison_t = BASE_T + TEN_YEARS_MS
        for version, partition in (("blue", 1), ("green", 2)):
            produce_raw(env, b"poison-" + version.encode(), b'{"by": "%s"}' % version.encode(),
                        TaggedRecord(version=version, event_time=poison_t,
                                     watermark=blue.watermark, batch=3).to_headers(),
                        partition=partition)
        for lo in range(300, 600, 100):
            blue.emit(events(lo, lo + 100))
            green.emit(events(lo, lo + 100))
        env.wait_horizon(BASE_T + 597 * STEP, versions=("blue", "green"))
        assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                       "--margin", "1s") == 0
        plan = env.view().plan
        assert plan is not None and plan.transition is not None
        boundary = plan.transition[2]
        for lo in range(600, 900, 100):
            green.emit(events(lo, lo + 100))
            blue.emit(events(lo, lo + 100))
        assert env.cli("wait", "--route", env.route, "--for", "clear-to-teardown",
                       "--timeout", "60s") == 0
        evs = events(0, 900)
        env.wait_output(len(evs))
        check_output(env, evs, lambda p, t: "green" if t >= boundary else "blue")
        dead = env.read(env.dlq)
        assert sorted((m.key(), m.partition()) for m in dead) == [
            (b"poison-blue", 1), (b"poison-green", 2)]
        for m in dead:
            reason = dict(m.headers())["bg.error"].decode()
            assert "future_tolerance_ms (600000 ms)" in reason, reason
        st = run_cli_json(env)
        assert st["counters"]["dead_lettered"] == 2
        assert all(ps["horizon"] < poison_t and ps["boundary"] == boundary
                   for ps in st["partitions"].values())
        router.assert_alive()
    finally:
        router.stop()


def _small_store_config(env: Env) -> Path:
    """Settings whose dedup store keeps 4 KiB of filter (full after a few hundred identities)
    and 1 MiB each of block cache and write buffer."""
    settings = env.settings_dict()
    settings["routes"][0]["dedup"].update(filter_bytes=4096, write_buffer_bytes=1 << 20)
    settings["store_memory"] = {"block_cache_bytes": 1 << 20, "write_buffer_bytes": 1 << 20}
    path = env.tmp / f"{env.name}-small-store.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_dedup_across_a_restart_with_a_store_far_larger_than_its_memory(
        bootstrap: str, tmp_path: Path) -> None:
    """200,000 identities in one partition's store (~4 MB on disk) against 4 KiB of filter
    and 1 MiB of block cache: after a clean restart, the job replays everything it wrote and
    adds new records; the replay is caught by RocksDB (the filter says "maybe" to
    everything), the new records pass although the filter also said "maybe" for them, and
    the store was kept, not rebuilt."""
    n = 200_000
    env = Env(bootstrap, tmp_path, partitions=1)
    config = _small_store_config(env)
    blue = Job(env, "blue")
    router = RouterProcess(env, config, name="first")
    try:
        router.wait_started()
        assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
        for lo in range(0, n, 20_000):
            blue.emit(events(lo, lo + 20_000))
        env.wait_output(n, timeout=240)
    finally:
        router.stop()
    store_dir = env.state_dir / env.route / "0"
    disk = sum(f.stat().st_size for f in store_dir.rglob("*") if f.is_file())
    assert disk > 3 * ((1 << 20) + 4096), disk  # > 3x block cache and filter together

    again = RouterProcess(env, config, name="second")
    try:
        again.wait_started()
        for lo in range(0, n, 20_000):  # the job replays all it wrote, then goes on
            blue.emit(events(lo, lo + 20_000))
        blue.emit(events(n, n + 2_000))
        evs = events(0, n + 2_000)
        env.wait_horizon(BASE_T + (n + 1_999) * STEP, timeout=240)
        env.wait_output(len(evs), timeout=120)
        check_output(env, evs, lambda p, t: "blue")
        st = run_cli_json(env)
        assert st["counters"]["duplicates"] == n
        assert st["counters"]["forwarded"] == 2_000  # counters are this worker's
        assert re.search(r"kept store", again.text()), again.tail()
        again.assert_alive()
    finally:
        again.stop()
