# The two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# Apache Kafka and Spark's Kafka connector, fetched once from Maven Central into an ignored cache.
JVM_CACHE ?= .cache/jvm
JVM_DIR   := $(abspath $(JVM_CACHE))
JVM_STAMP := $(JVM_CACHE)/.fetched-stamp
# helm, built once from the Go module proxy into the same ignored cache (tests/deploy lint and
# render the chart with it).
HELM_VERSION ?= v3.22.0
HELM         := .cache/bin/helm
# Strict decoding of rendered manifests with Kubernetes' own types (tests/deploy/kubecheck).
KUBECHECK    := .cache/bin/kubecheck
# Prometheus' own rule-file parser on the alert rules (tests/deploy/promcheck).
PROMCHECK    := .cache/bin/promcheck
MVN_COPY  := mvn -q -B -Dmaven.repo.local=$(JVM_DIR)/m2 dependency:copy-dependencies \
             -DincludeScope=runtime

.PHONY: demo test test-all bench conformance soak lint clean jvm helm wheel-check

# --- the supported-versions matrix: Spark 3.5 LTS and Apache Kafka 3.9 beside the pinned 4.x ---
# `make test-spark35`: the tagger's job shapes, kill -9 replay and the real-Spark conformance
# cells on pyspark 3.5 with Spark's Kafka connector for 3.5 (a second venv, .venv-spark35, which
# also holds the lowest confluent-kafka pyproject allows; .venv has the newest).
# `make test-kafka39`: the router's integration tests on Apache Kafka 3.9 (KRaft), with that
# lowest confluent-kafka.
# pyspark 3.5 needs NumPy 1, which pyarrow 20 and later no longer work with.
SPARK35      := 3.5.7
LOWEST_CONFLUENT_KAFKA := 2.13.0
SPARK35_VENV ?= .venv-spark35
SPARK35_PY   := $(SPARK35_VENV)/bin/python
SPARK35_STAMP := $(SPARK35_VENV)/.installed-stamp
MATRIX_STAMP := $(JVM_CACHE)/.matrix-fetched-stamp
# (abspath: JVM_CACHE may be given as an absolute path, e.g. a cache shared between checkouts)
.PHONY: jvm-matrix test-spark35 test-kafka39

$(SPARK35_STAMP): pyproject.toml setup.py router/native/_fastpath.c router/native/_blake2b.h \
  router/native/_plugin.h router/native/_produce.h
	@test -x $(SPARK35_PY) || $(PYTHON) -m venv $(SPARK35_VENV)
	@echo "installing cutover with pyspark $(SPARK35) into $(SPARK35_VENV) ..."
	@$(SPARK35_PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(SPARK35_PY) -m pip install -q --disable-pip-version-check -e '.[test]' \
	  'pyspark[connect]==$(SPARK35)' 'pyarrow<20' 'confluent-kafka==$(LOWEST_CONFLUENT_KAFKA)'
	@touch $(SPARK35_STAMP)

$(MATRIX_STAMP): jvm/kafka-broker-3.9.pom.xml jvm/spark-kafka-3.5.pom.xml
	@command -v mvn >/dev/null || { echo "the test ground needs Maven (apt-get install maven) and Java 17"; exit 1; }
	@echo "fetching Apache Kafka 3.9 and Spark 3.5's Kafka connector into $(JVM_CACHE) (once) ..."
	@rm -rf $(JVM_DIR)/kafka-3.9 $(JVM_DIR)/spark-kafka-3.5
	@$(MVN_COPY) -f jvm/kafka-broker-3.9.pom.xml -DoutputDirectory=$(JVM_DIR)/kafka-3.9
	@$(MVN_COPY) -f jvm/spark-kafka-3.5.pom.xml -DoutputDirectory=$(JVM_DIR)/spark-kafka-3.5 \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.12,spark-token-provider-kafka-0-10_2.12,kafka-clients,commons-pool2
	@touch $(MATRIX_STAMP)

jvm-matrix: $(MATRIX_STAMP)

# the job shapes (plain sink, update mode, foreachBatch with several sinks; Connect and
# connector-less reads refused), kill -9 replay of a plain sink and inside a foreachBatch
# function, the plain-sink and foreachBatch conformance cells through the router. The kill tests
# of the other shapes (update mode, several queries, a stream-stream join) rest on no
# Spark-version-specific code and run on Spark 4 (`make test-all`): on CI's 2 cores each takes
# 5 to 10 minutes on 3.5, past CI's 45 minutes (the README's Supported versions table).
SPARK35_TESTS := tests/spark/test_tagging_writer.py tests/spark/test_event_time.py \
  tests/spark/test_launcher_errors.py tests/spark/test_foreach_batch_writes.py \
  tests/spark/test_kill_restart.py tests/spark/test_update_mode_router.py \
  tests/spark/test_router_blue_green.py tests/spark/test_foreach_batch_router.py
# transactions, fencing, read-back after a crash, kill -9 and rebalances, static membership,
# the switch, the conformance grid's CI cells; and the compiled path on the lowest client:
# against the interpreted one, and its librdkafka plugin (records kept by its interceptor,
# forwards produced on the handle it was given)
KAFKA39_TESTS := tests/integration/test_router_transactions.py \
  tests/integration/test_router_fencing.py tests/integration/test_router_switch.py \
  tests/integration/test_router_failures.py tests/integration/test_router_static_membership.py \
  tests/conformance/test_conformance.py::test_ci_cell tests/unit/test_compiled_path.py \
  tests/unit/test_plugin_checks.py tests/integration/test_direct_reads.py \
  tests/integration/test_direct_produce.py

test-spark35: $(SPARK35_STAMP) $(JVM_STAMP) $(MATRIX_STAMP)
	CUTOVER_SPARK_KAFKA_JARS=$(JVM_DIR)/spark-kafka-3.5 \
	  $(SPARK35_PY) -m pytest -m 'not bench' $(SPARK35_TESTS)

test-kafka39: $(SPARK35_STAMP) $(JVM_STAMP) $(MATRIX_STAMP)
	CUTOVER_KAFKA_LIBS=$(JVM_DIR)/kafka-3.9 $(SPARK35_PY) -m pytest $(KAFKA39_TESTS)

$(STAMP): pyproject.toml setup.py router/native/_fastpath.c router/native/_blake2b.h \
  router/native/_plugin.h router/native/_produce.h
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cutover needs Python 3.11+; set PYTHON=python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing cutover and its dependencies into $(VENV) ..."
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(PY) -m pip uninstall -q -y cutover 2>/dev/null || true  # the distribution's former name
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

$(JVM_STAMP): jvm/kafka-broker.pom.xml jvm/spark-kafka.pom.xml
	@command -v mvn >/dev/null || { echo "the test ground needs Maven (apt-get install maven) and Java 17"; exit 1; }
	@echo "fetching Apache Kafka and Spark's Kafka connector into $(JVM_CACHE) (once) ..."
	@rm -rf $(JVM_DIR)/kafka $(JVM_DIR)/spark-kafka
	@$(MVN_COPY) -f jvm/kafka-broker.pom.xml -DoutputDirectory=$(JVM_DIR)/kafka
	@$(MVN_COPY) -f jvm/spark-kafka.pom.xml -DoutputDirectory=$(JVM_DIR)/spark-kafka \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
	@touch $(JVM_STAMP)

jvm: $(JVM_STAMP)

# The Kafka Streams application the router is benchmarked against (jvm/streams-router, Java 17,
# exactly_once_v2), built by Maven from Maven Central into the same ignored cache.
STREAMS_ROUTER := $(JVM_CACHE)/streams-router/streams-router.jar
.PHONY: jvm-streams

$(STREAMS_ROUTER): jvm/streams-router/pom.xml $(wildcard jvm/streams-router/src/main/java/cutover/streams/*.java)
	@command -v mvn >/dev/null || { echo "the benchmark needs Maven (apt-get install maven) and Java 17"; exit 1; }
	@echo "building the Kafka Streams router into $(JVM_CACHE)/streams-router ..."
	@mvn -q -B -Dmaven.repo.local=$(CURDIR)/$(JVM_CACHE)/m2 -f jvm/streams-router/pom.xml \
	  -Dstreams.build.dir=$(JVM_DIR)/streams-router package

jvm-streams: $(STREAMS_ROUTER)

$(HELM):
	@command -v go >/dev/null || { echo "the chart tests need Go to build helm (https://go.dev/dl)"; exit 1; }
	@echo "building helm $(HELM_VERSION) into $(dir $(HELM)) (once) ..."
	@GOBIN=$(CURDIR)/$(dir $(HELM)) GOFLAGS=-buildvcs=false go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(KUBECHECK): tests/deploy/kubecheck/main.go tests/deploy/kubecheck/go.mod tests/deploy/kubecheck/go.sum
	@command -v go >/dev/null || { echo "the chart tests need Go to build kubecheck (https://go.dev/dl)"; exit 1; }
	@cd tests/deploy/kubecheck && GOFLAGS=-buildvcs=false go build -o $(CURDIR)/$(KUBECHECK) .

$(PROMCHECK): tests/deploy/promcheck/main.go tests/deploy/promcheck/go.mod tests/deploy/promcheck/go.sum
	@command -v go >/dev/null || { echo "the chart tests need Go to build promcheck (https://go.dev/dl)"; exit 1; }
	@cd tests/deploy/promcheck && GOFLAGS=-buildvcs=false go build -o $(CURDIR)/$(PROMCHECK) .

helm: $(HELM) $(KUBECHECK) $(PROMCHECK)

# The distribution as users get it: sdist and wheel built, the wheel installed alone into a fresh
# venv, the core run without Spark (tests/packaging, also part of make test).
wheel-check: $(STAMP)
	$(PY) -m pytest -q tests/packaging

demo: $(STAMP)
	$(VENV)/bin/cutover demo

# mypy runs beside the suite (a minute of one core while the first tests mostly wait on their
# broker); its verdict is printed after the suite's, and either failing fails the target.
test: $(STAMP) $(JVM_STAMP) $(HELM) $(KUBECHECK) $(PROMCHECK)
	$(PY) -m ruff check .
	@mkdir -p var
	$(PY) -m mypy > var/mypy.log 2>&1 & types=$$!; $(PY) -m pytest; tests=$$?; \
	  wait $$types; typed=$$?; echo "mypy:"; cat var/mypy.log; exit $$(( tests || typed ))

test-all: $(STAMP) $(JVM_STAMP) $(HELM) $(KUBECHECK) $(PROMCHECK)
	$(PY) -m pytest -m 'not bench and not conformance_full'

bench: $(STAMP) $(JVM_STAMP) $(STREAMS_ROUTER)
	$(PY) -m pytest -m bench -s tests/bench tests/spark/test_bench_kafka.py
	$(PY) -m tests.docs.performance_page --merge var/bench/results.json   # -> docs/performance.md

conformance: $(STAMP) $(JVM_STAMP)
	$(PY) -m pytest -m conformance_full -s tests/conformance

# The chaos soak (tests/soak): faults at random for SOAK_MINUTES on a three-broker cluster with
# broker defaults, every output record checked; writes docs/soak.md. SOAK_SEED=N replays a run.
SOAK_MINUTES ?= 30
soak: $(STAMP) $(JVM_STAMP)
	SOAK_MINUTES=$(SOAK_MINUTES) $(PY) -m tests.soak

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
