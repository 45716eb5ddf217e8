"""The checks before the router's clients load the compiled extension as their librdkafka
plugin (router/native/_plugin.h): each refusal names what is missing, and the router then reads
records through the accessors and produces through ``Producer.produce``. A client made with a
tap is attached to it for its life, through librdkafka's on_new and on_destroy."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, libversion

from router.native import compiled

pytestmark = pytest.mark.skipif(not compiled.available(),
                                reason="the compiled extension is not built")
CLIENT = importlib.import_module("confluent_kafka.cimpl").__file__


def test_a_refused_plugin_says_why() -> None:
    fp = compiled._fastpath
    assert fp is not None and CLIENT is not None
    version = libversion()[1]

    def use(*, client: str, version: int, plugin: str = compiled.PLUGIN_FILE) -> str | None:
        assert fp is not None
        reason: str | None = fp.use_plugin(client=client, version=version, plugin=plugin)
        return reason

    try:
        assert use(client="/nowhere/cimpl.so", version=version) == \
            "/nowhere/cimpl.so is not loaded"
        assert use(client=fp.__file__, version=version) == \
            "librdkafka has no rd_kafka_conf_interceptor_add_on_conf_set (as loaded by " \
            f"{fp.__file__})"
        assert use(client=CLIENT, version=version + 1) == \
            f"librdkafka found is version {version:#x}, confluent-kafka reports " \
            f"{version + 1:#x}"
        assert (use(client=CLIENT, version=version, plugin="/nowhere/plugin.so") or "") \
            .startswith("librdkafka does not load /nowhere/plugin.so as its plugin: ")
        with pytest.raises(RuntimeError, match="the plugin is off"):
            fp.Tap()
    finally:  # on again, for the tests after this one
        assert use(client=CLIENT, version=version) is None
    assert compiled.PLUGIN is None, compiled.PLUGIN


def test_a_client_made_with_a_tap_is_attached_until_it_is_destroyed() -> None:
    conf: dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    producer = compiled.tapped_producer(dict(conf))
    tap = compiled.client_tap(conf, consumer=False)
    assert tap is not None
    assert conf["plugin.library.paths"] == compiled.PLUGIN_FILE
    assert conf["cutover.tap"] == tap.token
    assert not tap.attached
    p = Producer(conf)
    assert tap.attached
    tap.bind(p)
    del p  # confluent-kafka destroys the client: on_destroy lets the tap go
    assert not tap.attached
    del producer

    cconf: dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g",
                             "log_level": 0, "plugin.library.paths": "/some/other/plugin.so"}
    ctap = compiled.client_tap(cconf, consumer=True)
    assert ctap is not None
    # the operator's plugin first, then this one
    assert cconf["plugin.library.paths"] == f"/some/other/plugin.so;{compiled.PLUGIN_FILE}"


def test_a_token_of_no_tap_is_refused() -> None:
    from confluent_kafka import KafkaException
    with pytest.raises(KafkaException, match="no tap of this process"):
        Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g",
                  "plugin.library.paths": compiled.PLUGIN_FILE, "cutover.tap": "255.999999"})
