"""deploy/spark-k8s/tag_driver.py, the driver program of the SparkApplication and of
`spark-submit --deploy-mode cluster`: started by a real spark-submit (local master, the same
Python runner a cluster-mode driver pod uses, with the JVM up before the Python program), it
runs the job under the tagger, and the job's Kafka write reaches the broker tagged.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "deploy" / "spark-k8s" / "tag_driver.py"

pytestmark = [pytest.mark.deploy, pytest.mark.spark, pytest.mark.broker]

JOB = """
import sys
from pyspark.sql import SparkSession

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.appName("tag-driver-test").getOrCreate()
rows = [("c1", '{"total": 1}', "2026-01-01 00:00:01"),
        ("c2", '{"total": 2}', "2026-01-01 00:00:02")]
df = spark.createDataFrame(rows, "key string, value string, ts string")
df = df.selectExpr("key", "value", "to_timestamp(ts) AS ts")
(df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
   .option("topic", topic).save())
spark.stop()
"""


def read_all(bootstrap: str, topic: str, partitions: int) -> list[dict[str, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tag-driver-test",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[dict[str, str]] = []
    try:
        for _ in range(20):
            for m in consumer.consume(100, timeout=1.0):
                if m.error() is None:
                    headers = {k: v.decode() for k, v in (m.headers() or [])}
                    out.append({**headers, "key": (m.key() or b"").decode()})
    finally:
        consumer.close()
    return out


def test_spark_submit_runs_the_job_under_the_tagger_through_tag_driver(
        bootstrap: str, topic_factory: object, tmp_path: Path) -> None:
    topic = topic_factory("tagdriver", partitions=2)  # type: ignore[operator]
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    submit = Path(sys.executable).with_name("spark-submit")
    done = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.session.timeZone=UTC", str(DRIVER),
         "--version", "blue", "--event-time", "ts", "--quiet", "--", str(job), bootstrap,
         topic],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [r for r in read_all(bootstrap, topic, 2) if r.get("bg.kind", "data") == "data"]
    assert sorted(r["key"] for r in records) == ["c1", "c2"]
    for r in records:
        assert r["bg.version"] == "blue"
        assert r["bg.event_time"] in {"1767225601000", "1767225602000"}
