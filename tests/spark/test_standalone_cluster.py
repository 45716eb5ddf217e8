"""The tagger off the driver: a Spark standalone cluster started from pyspark's own jars.

A master and a worker (``spark-class ...Master`` / ``...Worker``), executors in their own JVMs
with their own Python workers, and ``cutover tag`` as the client-mode driver
(``--master spark://...``, which PySpark hands to ``spark-submit``). The executors' Python has
the tagger's dependencies but not the tagger: it reaches them as the README says, as a zip in
``--py-files``. The enrichment example's records are then checked as on one machine: event
time, batch, the batch's watermark, heartbeats on every partition. And a kill -9 of the driver
mid-batch, then a restart on the checkpoint, gives a straight run's records. No process of the
cluster (master, worker, executors, their Python workers) outlives a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from spark_test_support import (
    JOBS,
    REPO,
    TEST_JOBS,
    OutputWatcher,
    TagRun,
    assign_batches,
    check_replay,
    committed_batches,
    connector_jars,
    expected_watermarks,
    kill_mid_batch,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
    wait_for,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, parse_headers
from testground.brokers import create_topics
from tests.children import Child
from tests.topics import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

SPARK_HOME = Path(sys.modules["pyspark"].__file__ if "pyspark" in sys.modules
                  else __import__("pyspark").__file__).parent
PARTITIONS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tagger_zip(path: Path) -> Path:
    """The tagger as executors get it: ``cutover`` and ``spark_tagger``, sources only."""
    with zipfile.ZipFile(path, "w") as z:
        for package in ("cutover", "spark_tagger"):
            for f in sorted((REPO / package).rglob("*.py")):
                z.write(f, f.relative_to(REPO).as_posix())
    return path


def executor_python(folder: Path) -> Path:
    """A Python with the tagger's dependencies (this environment's site-packages) and without
    the tagger itself (the editable install's .pth is not processed from a path entry)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def cluster_processes(groups: Iterable[int]) -> list[str]:
    """The live processes (pid and command) in the given process groups: a master or worker
    started in a group of its own takes its executors and their Python workers with it."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,stat=,args="], capture_output=True,
                        text=True, check=True)
    wanted = set(groups)
    out = []
    for line in ps.stdout.splitlines():
        pid, pgid, stat, args = line.split(None, 3)
        if int(pgid) in wanted and not stat.startswith("Z"):
            out.append(f"{pid} {args}")
    return out


@dataclass(frozen=True)
class Cluster:
    url: str              # spark://127.0.0.1:port
    groups: tuple[int, ...]  # process groups of the master and the worker (executors included)
    work: Path            # the worker's work dir (an application's executor logs under it)

    def executors(self) -> list[str]:
        return [p for p in cluster_processes(self.groups) if "CoarseGrainedExecutorBackend" in p]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # no PYTHONPATH (a checkout run with PYTHONPATH set would hand the tagger to executors)
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1", "PYTHONPATH": ""}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    master = Child([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(_free_port())],
                   tmp_path / "master.log", env=env)
    worker: Child | None = None
    groups = [master.proc.pid]
    try:
        master.wait_for_line("I have been elected leader", 120)
        worker = Child([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                        "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port",
                        str(_free_port()), "--work-dir", str(tmp_path / "work")],
                       tmp_path / "worker.log", env=env)
        groups.append(worker.proc.pid)
        worker.wait_for_line("Successfully registered with master", 120)
        yield Cluster(url, tuple(groups), tmp_path / "work")
    finally:
        if worker is not None:
            worker.stop(20)
        master.stop(20)
        # nothing of the cluster outlives it: master, worker, executors, their Python workers
        deadline = time.monotonic() + 30
        while (left := cluster_processes(groups)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for group in groups if left else ():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        assert not left, f"the cluster's processes outlived it: {[p[:200] for p in left]}"


def driver_env(cluster: Cluster, tmp_path: Path) -> dict[str, str]:
    """The environment of ``cutover tag`` as the cluster's client-mode driver: executors get the
    tagger as a zip in ``--py-files`` and a Python that has its dependencies, not the tagger."""
    python = executor_python(tmp_path / "executor-venv")
    probe = subprocess.run([str(python), "-c", "import confluent_kafka, pydantic, pyarrow\n"
                            "try:\n import spark_tagger\nexcept ImportError: print('absent')"],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": ""})  # as the worker runs it
    assert probe.stdout.strip() == "absent", probe.stderr  # only the zip can bring it
    shipped = tagger_zip(tmp_path / "cutover-tagger.zip")
    submit = (f"--master {cluster.url} --deploy-mode client --driver-memory 1g "
              "--executor-memory 1g --total-executor-cores 2 "
              f"--py-files {shipped} --jars {','.join(map(str, connector_jars()))} "
              f"--conf spark.pyspark.python={python} --conf spark.sql.shuffle.partitions=2 "
              "--conf spark.ui.enabled=false --conf spark.sql.session.timeZone=UTC "
              "--conf spark.driver.host=127.0.0.1 pyspark-shell")
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_SUBMIT_ARGS": submit,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "PYSPARK_PYTHON": str(python),
            "PYTHONUNBUFFERED": "1"}


def test_tagging_on_a_standalone_cluster_with_the_tagger_shipped_as_py_files(
    cluster: Cluster, bootstrap: str, tmp_path: Path
) -> None:
    env = driver_env(cluster, tmp_path)
    tin, tout = f"cluster-in-{uuid.uuid4().hex[:8]}", f"cluster-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=71, count=200, customers=5)))
    ck = tmp_path / "ck"
    res = subprocess.run(tag_command("blue", JOBS / "enrich_orders.py", [
        "--bootstrap", bootstrap, "--input", tin, "--output", tout, "--checkpoint", str(ck),
        "--available-now", "--max-offsets-per-trigger", "60"]),
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO,
        stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-4000:]
    # the records were produced by executors: the worker ran them, in their own JVMs
    executor_logs = list(cluster.work.rglob("stderr"))
    assert executor_logs, "no executor ran on the worker"

    orders = orders_by_position(read_topic(bootstrap, tin))
    logs = offset_logs(ck, tin)
    # the watermark each batch used, as Spark's checkpoint holds it (on the cluster it can
    # trail the one recomputed from the input: noted, not the tagger's to decide)
    wms = {log.batch: log.meta.batchWatermarkMs or None for log in logs}
    recomputed = expected_watermarks(logs, orders, 5_000)
    assert all((wms[b] or 0) <= (w or 0) for b, w in recomputed.items())
    assert len({w for w in wms.values() if w}) >= 2, "the watermark never moved"
    batch_of = assign_batches(logs, orders)
    by_id = {o.order_id: pos for pos, o in orders.items()}
    records = read_topic(bootstrap, tout)
    got = set()
    for rec in records:
        tagged = parse_headers(list(rec.headers))
        assert tagged.version == "blue"
        if rec.header(KIND):
            continue
        pos = by_id[json.loads(rec.value or b"")["order_id"]]
        assert tagged.event_time == orders[pos].ts
        assert tagged.batch == batch_of[pos] and tagged.watermark == wms[batch_of[pos]]
        got.add(orders[pos].order_id)
    assert got == {o.order_id for o in orders.values() if o.amount >= 5}
    beats = sorted((r.partition, int(r.header("bg.batch") or -1)) for r in records
                   if r.header(KIND))
    assert beats == sorted((p, b) for p in range(PARTITIONS) for b in wms)


def test_kill_9_of_the_driver_mid_batch_on_a_standalone_cluster_then_restart(
    cluster: Cluster, bootstrap: str, tmp_path: Path
) -> None:
    """kill -9 of ``cutover tag`` (the client-mode driver) while a batch has written records
    but not its heartbeats, then a restart on the checkpoint, both on the cluster. The killed
    application's executors are ended by the cluster; the records are those of a straight run
    on the cluster, a copy only of the killed batch's and byte-identical to it, and every
    committed batch has heartbeats on every partition. The job's Python UDF takes 40 ms a row,
    4 input partitions and 2 executor cores: a batch runs in two waves of tasks."""
    env = driver_env(cluster, tmp_path)
    n = uuid.uuid4().hex[:8]
    tin, ref, tout = f"ckill-in-{n}", f"ckill-ref-{n}", f"ckill-out-{n}"
    create_topics(bootstrap, {tin: 4, ref: PARTITIONS, tout: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=73, count=300, customers=6)))
    job = TEST_JOBS / "slow_enrich.py"

    def args(topic: str, ck: Path) -> list[str]:
        return ["--bootstrap", bootstrap, "--input", tin, "--output", topic,
                "--checkpoint", str(ck)]

    run_tag(tag_command("blue", job, [*args(ref, tmp_path / "ref"), "--available-now"]),
            tmp_path / "ref.log", timeout=600, env=env)
    ck = tmp_path / "ck"
    first = TagRun(tag_command("blue", job, args(tout, ck)), tmp_path / "first.log", env).start()
    wait_for(cluster.executors, 120, "the application's executors")
    killed_in = kill_mid_batch(first, OutputWatcher(bootstrap, tout, PARTITIONS), ck)
    # the driver is gone: the master removes its application and the worker its executors
    wait_for(lambda: not cluster.executors(), 120, "the killed driver's executors to end")
    second = run_tag(tag_command("blue", job, [*args(tout, ck), "--available-now"]),
                     tmp_path / "second.log", timeout=600, env=env)
    assert second.reports()[0].batch == killed_in  # the restart replays the killed batch first
    check_replay(read_topic(bootstrap, ref), read_topic(bootstrap, tout), committed_batches(ck),
                 PARTITIONS, killed_in)
    apps = {d.name for d in cluster.work.iterdir() if d.name.startswith("app-")}
    assert len(apps) == 3, apps  # reference, killed and restarted runs: each an application
