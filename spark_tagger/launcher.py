"""Running an unmodified PySpark job with the tagger: patch, then ``runpy`` the job file.

The job runs in this process, as the Spark driver. Before its first line, the launcher patches
PySpark's readers and writers:

* ``writeStream.format("kafka")`` is always served by the tagging sink (:mod:`.tagger`): at
  ``start()`` the launcher finds the event time, then starts the same query (same output mode,
  trigger, name, checkpoint and options) with ``foreachBatch`` instead of the Kafka sink;
* a ``foreachBatch`` function is wrapped (:mod:`.foreach_batch`) so the Kafka writes it makes
  belong to its query's batch, and batch ``write.format("kafka")`` anywhere is tagged by the
  tagger itself (:mod:`.batch_writer`), whichever connector the job has;
* ``readStream.format("kafka")`` and batch ``read`` use the Python source ``cutover_kafka``
  wherever Spark's JVM Kafka connector is absent (``--kafka-source``);
* on Spark Connect, the Connect client's writers are patched instead (:mod:`.connect`).

A problem the operator must fix (no event time, no topic, complete output mode) raises
:class:`TaggerError` at ``start()``, before any batch runs.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import TYPE_CHECKING, Any

from spark_tagger.batch_writer import save_tagged
from spark_tagger.client_security import KafkaOptionError
from spark_tagger.connect import install_connect
from spark_tagger.event_time import EventTimeError, attach_event_time
from spark_tagger.foreach_batch import TaggedForeachBatch
from spark_tagger.options import SinkOptions
from spark_tagger.output_modes import check_output_mode
from spark_tagger.refusal import TaggerError
from spark_tagger.spark_version import connector_coordinates, has_python_data_sources
from spark_tagger.tagger import BatchTagger, TagSettings

if TYPE_CHECKING:
    from pyspark.sql.readwriter import DataFrameReader
    from pyspark.sql.streaming.readwriter import DataStreamReader

JVM_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

_settings: TagSettings | None = None
_originals: dict[tuple[type, str], Any] = {}

__all__ = ["TaggerError", "install", "run_job"]


def jvm_kafka_available(spark: Any) -> bool:
    try:
        return bool(spark._jvm.org.apache.spark.util.Utils.classIsLoadable(JVM_KAFKA_PROVIDER))
    except Exception:  # py4j errors: treat as absent
        return False


def use_python_kafka(spark: Any) -> bool:
    """Whether the pure-Python source serves the job's Kafka reads; on Spark 3.5, which has no
    Python data source API, a read that would need it is refused with the fix."""
    mode = _settings.kafka_source if _settings is not None else "auto"
    python = mode == "python" or (mode == "auto" and not jvm_kafka_available(spark))
    if python and not has_python_data_sources():
        import pyspark

        why = ("--kafka-source python was asked for" if mode == "python"
               else "Spark's Kafka connector is not on the job's classpath")
        raise TaggerError(
            f"the job reads Kafka, {why}, and pyspark {pyspark.__version__} has no Python data "
            "source API (Spark 4) for the tagger's own source: add the connector, e.g. "
            f"--conf spark.jars.packages={connector_coordinates()} (or spark.jars with its "
            "jars)")
    return python


def ensure_registered(spark: Any) -> None:
    """Register ``cutover_kafka`` once per session (registration is per session)."""
    from spark_tagger.kafka_source import CutoverKafka

    jss = spark._jsparkSession
    if getattr(spark, "_cutover_kafka_registered", None) is jss:
        return
    spark.dataSource.register(CutoverKafka)
    spark._cutover_kafka_registered = jss


_said_reader: list[bool] = []


def _say_reader(python: bool) -> None:
    """Say once which connector serves the job's Kafka reads (users ask; tests check it)."""
    if _said_reader or (_settings is not None and _settings.quiet):
        return
    _said_reader.append(python)
    which = ("the pure-Python source (Spark's Kafka connector is not on the classpath)"
             if python else "Spark's Kafka connector (spark-sql-kafka-0-10)")
    print(f"cutover tag: Kafka reads served by {which}", file=sys.stderr, flush=True)


def _orig(cls: type, name: str) -> Any:
    return _originals[(cls, name)]


def _patch(cls: type, name: str, fn: Any) -> None:
    if (cls, name) not in _originals:
        _originals[(cls, name)] = getattr(cls, name)
    setattr(cls, name, fn)


def _is_kafka(source: Any) -> bool:
    return isinstance(source, str) and source.strip().lower() == "kafka"


def _writer_state(w: Any) -> dict[str, Any]:
    state: dict[str, Any] | None = w.__dict__.get("_bg_state")
    if state is None:
        state = {"format": None, "options": {}, "outputMode": None, "trigger": None,
                 "queryName": None}
        w.__dict__["_bg_state"] = state
    return state


def install(settings: TagSettings) -> None:
    """Patch PySpark (idempotent). Called by the launcher before the job's first line."""
    global _settings
    _settings = settings
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    # --- reads (streaming and batch): the Python connector if the JVM one is absent
    def make_format(cls: type[DataStreamReader] | type[DataFrameReader]) -> Any:
        original = _originals.get((cls, "format"), cls.format)

        def format(self: Any, source: str) -> Any:
            if _is_kafka(source):
                python = use_python_kafka(self._spark)
                _say_reader(python)
                if python:
                    from spark_tagger.kafka_source import NAME as PY_KAFKA

                    ensure_registered(self._spark)
                    source = PY_KAFKA
            return original(self, source)

        return format

    for cls in (DataStreamReader, DataFrameReader):
        _patch(cls, "format", make_format(cls))
    _install_batch_writer(DataFrameWriter)

    # --- streaming writes: record what the job sets, swap the sink at start()
    dsw = DataStreamWriter

    def w_format(self: Any, source: str) -> Any:
        _writer_state(self)["format"] = source
        if _is_kafka(source):
            return self  # the Kafka sink is never used; the tagger replaces it at start()
        return _orig(dsw, "format")(self, source)

    def w_option(self: Any, key: str, value: Any) -> Any:
        _writer_state(self)["options"][key] = value
        return _orig(dsw, "option")(self, key, value)

    def w_options(self: Any, **options: Any) -> Any:
        _writer_state(self)["options"].update(options)
        return _orig(dsw, "options")(self, **options)

    def w_output_mode(self: Any, outputMode: str) -> Any:
        _writer_state(self)["outputMode"] = outputMode
        return _orig(dsw, "outputMode")(self, outputMode)

    def w_trigger(self: Any, *args: Any, **kwargs: Any) -> Any:
        _writer_state(self)["trigger"] = (args, kwargs)
        return _orig(dsw, "trigger")(self, *args, **kwargs)

    def w_query_name(self: Any, queryName: str) -> Any:
        _writer_state(self)["queryName"] = queryName
        return _orig(dsw, "queryName")(self, queryName)

    def w_foreach_batch(self: Any, func: Any) -> Any:
        state = _writer_state(self)
        state["format"] = "foreachBatch"
        assert _settings is not None
        state["foreachBatch"] = TaggedForeachBatch(func, self._spark, _settings, state)
        return _orig(dsw, "foreachBatch")(self, state["foreachBatch"])

    def w_foreach(self: Any, f: Any) -> Any:
        _writer_state(self)["format"] = "foreach"
        return _orig(dsw, "foreach")(self, f)

    def w_start(self: Any, path: str | None = None, format: str | None = None,
                outputMode: str | None = None, partitionBy: Any = None,
                queryName: str | None = None, **options: Any) -> Any:
        if options:
            self.options(**options)
        if outputMode is not None:
            self.outputMode(outputMode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        if queryName is not None:
            self.queryName(queryName)
        state = _writer_state(self)
        if _is_kafka(state["format"]):
            return start_tagged(self)
        if state["format"] == "foreachBatch":
            return start_foreach_batch(self, path)
        return _orig(dsw, "start")(self, path)

    _patch(dsw, "format", w_format)
    _patch(dsw, "option", w_option)
    _patch(dsw, "options", w_options)
    _patch(dsw, "outputMode", w_output_mode)
    _patch(dsw, "trigger", w_trigger)
    _patch(dsw, "queryName", w_query_name)
    _patch(dsw, "foreachBatch", w_foreach_batch)
    _patch(dsw, "foreach", w_foreach)
    _patch(dsw, "start", w_start)


def _install_batch_writer(dfw: type) -> None:
    """Batch ``write.format("kafka")``: recorded as the job sets it, tagged at ``save()``."""

    def b_format(self: Any, source: str) -> Any:
        _writer_state(self)["format"] = source
        if _is_kafka(source):
            return self  # the tagger writes; neither connector sees it
        return _orig(dfw, "format")(self, source)

    def b_option(self: Any, key: str, value: Any) -> Any:
        _writer_state(self)["options"][key] = value
        return _orig(dfw, "option")(self, key, value)

    def b_options(self: Any, **options: Any) -> Any:
        _writer_state(self)["options"].update(options)
        return _orig(dfw, "options")(self, **options)

    def b_mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            _writer_state(self)["mode"] = saveMode
        return _orig(dfw, "mode")(self, saveMode)

    def b_save(self: Any, path: str | None = None, format: str | None = None,
               mode: str | None = None, partitionBy: Any = None, **options: Any) -> None:
        if options:
            self.options(**options)
        if mode is not None:
            self.mode(mode)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        state = _writer_state(self)
        if not _is_kafka(state["format"]):
            return _orig(dfw, "save")(self, path)  # type: ignore[no-any-return]
        assert _settings is not None
        save_tagged(self._df, state["options"], state.get("mode"), _settings)
        return None

    _patch(dfw, "format", b_format)
    _patch(dfw, "option", b_option)
    _patch(dfw, "options", b_options)
    _patch(dfw, "mode", b_mode)
    _patch(dfw, "save", b_save)


def start_tagged(writer: Any) -> Any:
    """Start the job's Kafka-bound query through the tagging sink."""
    assert _settings is not None
    state = _writer_state(writer)
    options = {str(k): ("" if v is None else str(v)) for k, v in state["options"].items()}
    try:
        sink = SinkOptions.from_options(options)
    except KafkaOptionError as exc:
        raise TaggerError(f"the job's Kafka sink: {exc}") from None
    if sink.topic is None:
        raise TaggerError(
            "the job's Kafka sink has no .option('topic', ...); the tagger needs one output "
            "topic per query to send heartbeats to every partition of it"
        )
    query = (f"query {state['queryName']!r}" if state["queryName"]
             else f"the query writing to topic {sink.topic!r}")
    check_output_mode(state["outputMode"], query, _settings.quiet)
    trigger = state["trigger"]
    if trigger is not None and "continuous" in trigger[1]:
        raise TaggerError("continuous triggers are not supported by the tagger (it works per "
                          "micro-batch); use processingTime or availableNow")
    try:
        tagged_df, found = attach_event_time(writer._df, _settings.event_time)
    except EventTimeError as exc:
        raise TaggerError(str(exc)) from None
    tagger = BatchTagger(writer._spark, _settings, sink)
    if not _settings.quiet:
        print(f"cutover tag: version {_settings.version} -> topic {sink.topic}; event time: "
              f"{found.description}", file=sys.stderr, flush=True)
    query = _started_again(state, tagged_df, tagger)
    tagger.query.set(query)
    return query


def start_foreach_batch(writer: Any, path: str | None) -> Any:
    """Start a ``foreachBatch`` query, its event time computed on the stream when it has one.

    The column is added to the streaming DataFrame here, where the watermark is visible, and
    the job's function gets each batch without it (:mod:`.foreach_batch`); the Kafka writes the
    function makes find it underneath. A query without an event time starts unchanged: it may
    write no Kafka at all, and a Kafka write it makes is refused then, before sending anything.
    """
    assert _settings is not None
    state = _writer_state(writer)
    wrapper = state["foreachBatch"]
    try:
        tagged_df, _found = attach_event_time(writer._df, _settings.event_time)
    except EventTimeError:
        query = _orig(type(writer), "start")(writer, path)
    else:
        wrapper.carried = True
        query = _started_again(state, tagged_df, wrapper)
    wrapper.query.set(query)
    return query


def _started_again(state: dict[str, Any], df: Any, func: Any) -> Any:
    """The job's query, as its writer was set up, over ``df`` and through ``func``."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    new = DataStreamWriter(df)
    orig = _originals
    if state["outputMode"] is not None:
        orig[(DataStreamWriter, "outputMode")](new, state["outputMode"])
    if state["trigger"] is not None:
        orig[(DataStreamWriter, "trigger")](new, *state["trigger"][0], **state["trigger"][1])
    if state["queryName"] is not None:
        orig[(DataStreamWriter, "queryName")](new, state["queryName"])
    for key, value in state["options"].items():
        orig[(DataStreamWriter, "option")](new, key, value)
    orig[(DataStreamWriter, "foreachBatch")](new, func)
    return orig[(DataStreamWriter, "start")](new)


def _connect_requested(options: dict[str, Any]) -> str | None:
    """How the job asks for Spark Connect, if it does (as ``Builder.getOrCreate`` decides)."""
    if "spark.remote" in options:
        return f"SparkSession.builder.remote({str(options['spark.remote'])!r})"
    if str(options.get("spark.api.mode", os.environ.get("SPARK_API_MODE", ""))).lower() \
            == "connect":
        return "spark.api.mode=connect"
    for env in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        if os.environ.get(env):
            return f"{env} is set"
    return None


def _connect_needs_client(served: bool) -> None:
    """Patch ``SparkSession.Builder.getOrCreate``: without PySpark's Connect client installed,
    a Connect session is refused at creation with the fix, instead of an import error; on
    Spark 3.5, whose Connect client the tagger does not patch, with the alternatives."""
    from pyspark.sql.session import SparkSession

    builder = SparkSession.Builder

    def get_or_create(self: Any) -> Any:
        how = _connect_requested(dict(self._options))
        if how is not None and not has_python_data_sources():
            import pyspark

            raise TaggerError(
                f"the job builds a Spark Connect session ({how}); on pyspark "
                f"{pyspark.__version__} the tagger serves classic sessions only (it tags "
                "Connect jobs from Spark 4 on): run the job with a classic SparkSession on "
                "Spark 3.5, or on Spark Connect with pyspark 4")
        if how is not None and not served:
            raise TaggerError(
                f"the job builds a Spark Connect session ({how}) but PySpark's Connect client "
                "is not installed, so the tagger cannot serve it; install pyspark[connect] "
                "(grpcio, grpcio-status, googleapis-common-protos, zstandard)")
        return _orig(builder, "getOrCreate")(self)

    _patch(builder, "getOrCreate", get_or_create)


def missing_kafka_connector(exc: BaseException) -> str | None:
    """The sentence for Spark's "Failed to find data source: kafka", or None for any other
    error. On Spark Connect it comes from the server, which needs the connector itself."""
    text = str(exc)
    if "Failed to find data source: kafka" not in text and not (
            "DATA_SOURCE_NOT_FOUND" in text and "kafka" in text.lower()):
        return None
    coordinates = connector_coordinates()
    if type(exc).__module__.startswith("pyspark.errors.exceptions.connect"):
        return ("the job reads or writes Kafka but the Spark Connect server has no Kafka "
                "connector (Failed to find data source: kafka): start a local server with "
                f"--conf spark.jars.packages={coordinates} (or spark.jars with its jars), or "
                f"install {coordinates} as a library of the remote cluster")
    return ("the job reads or writes Kafka but Spark's Kafka connector is not on its classpath "
            f"(Failed to find data source: kafka): add --conf spark.jars.packages={coordinates}"
            " (or spark.jars with its jars)")


def run_job(settings: TagSettings, job: str, args: list[str]) -> int:
    """Run ``job`` as ``__main__`` with ``args`` as its argv, under the tagger."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    install(settings)
    _connect_needs_client(has_python_data_sources() and install_connect(settings, _patch))
    job_dir = os.path.dirname(os.path.abspath(job))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [job, *args]
    sys.path.insert(0, job_dir)
    try:
        runpy.run_path(job, run_name="__main__")
    except TaggerError:
        raise
    except Exception as exc:
        sentence = missing_kafka_connector(exc)
        if sentence is None:
            raise
        raise TaggerError(sentence) from None
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path = saved_argv, saved_path
    return 0
