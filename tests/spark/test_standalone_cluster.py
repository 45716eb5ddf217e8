"""The tagger off the driver: a Spark standalone cluster started from pyspark's own jars.

A master and a worker (``spark-class ...Master`` / ``...Worker``), executors in their own JVMs
with their own Python workers, and ``cutover tag`` as the client-mode driver
(``--master spark://...``, which PySpark hands to ``spark-submit``). The executors' Python has
the tagger's dependencies but not the tagger: it reaches them as the README says, as a zip in
``--py-files``. The enrichment example's records are then checked as on one machine: event
time, batch, the batch's watermark, heartbeats on every partition.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_test_support import (
    JOBS,
    REPO,
    assign_batches,
    connector_jars,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    tag_command,
)

from cutover.broker import create_topics
from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, parse_headers
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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1"}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    master = Child([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", str(_free_port())],
                   tmp_path / "master.log", env=env)
    worker: Child | None = None
    try:
        master.wait_for_line("I have been elected leader", 120)
        worker = Child([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                        "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port",
                        str(_free_port()), "--work-dir", str(tmp_path / "work")],
                       tmp_path / "worker.log", env=env)
        worker.wait_for_line("Successfully registered with master", 120)
        yield url
    finally:
        if worker is not None:
            worker.stop(20)
        master.stop(20)


def test_tagging_on_a_standalone_cluster_with_the_tagger_shipped_as_py_files(
    cluster: str, bootstrap: str, tmp_path: Path
) -> None:
    python = executor_python(tmp_path / "executor-venv")
    probe = subprocess.run([str(python), "-c", "import confluent_kafka, pydantic, pyarrow\n"
                            "try:\n import spark_tagger\nexcept ImportError: print('absent')"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.stdout.strip() == "absent", probe.stderr  # only the zip can bring it
    shipped = tagger_zip(tmp_path / "cutover-tagger.zip")

    tin, tout = f"cluster-in-{uuid.uuid4().hex[:8]}", f"cluster-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=71, count=200, customers=5)))
    ck = tmp_path / "ck"
    submit = (f"--master {cluster} --deploy-mode client --driver-memory 1g "
              "--executor-memory 1g --total-executor-cores 2 "
              f"--py-files {shipped} --jars {','.join(map(str, connector_jars()))} "
              f"--conf spark.pyspark.python={python} --conf spark.sql.shuffle.partitions=2 "
              "--conf spark.ui.enabled=false --conf spark.sql.session.timeZone=UTC "
              "--conf spark.driver.host=127.0.0.1 pyspark-shell")
    env = {**dict(__import__("os").environ), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_SUBMIT_ARGS": submit, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYSPARK_PYTHON": str(python), "PYTHONUNBUFFERED": "1"}
    res = subprocess.run(tag_command("blue", JOBS / "enrich_orders.py", [
        "--bootstrap", bootstrap, "--input", tin, "--output", tout, "--checkpoint", str(ck),
        "--available-now", "--max-offsets-per-trigger", "60"]),
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO,
        stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-4000:]
    # the records were produced by executors: the worker ran them, in their own JVMs
    executor_logs = list((tmp_path / "work").rglob("stderr"))
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
